"""Built-in coding problems, written for this project (no third-party data).

In-domain ("id"): single-function problems on numbers, strings and lists, and short stdio
programs. Out-of-domain ("ood"): problem kinds training never sees: dictionaries and counting,
multi-line stdio input, and small simulations. Each problem carries a reference solution, which
the test suite runs against the problem's tests in the sandbox.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from rlanything_core.envs.coding.humaneval import load_humaneval
from rlanything_core.envs.coding.tasks import CodingSpec, parse_coding_spec
from rlanything_core.envs.common import SpecError

Problem = dict[str, Any]


def _fn(
    pid: str, problem: str, entry: str, tests: list[tuple[list[Any], Any]], ref: str
) -> Problem:
    return {
        "id": pid,
        "spec": {
            "problem": problem,
            "style": "function",
            "entry_point": entry,
            "tests": [{"args": a, "expected": e} for a, e in tests],
        },
        "reference": ref,
    }


def _io(pid: str, problem: str, tests: list[tuple[str, str]], ref: str) -> Problem:
    return {
        "id": pid,
        "spec": {
            "problem": problem,
            "style": "stdio",
            "tests": [{"stdin": i, "expected": o} for i, o in tests],
        },
        "reference": ref,
    }


ID_PROBLEMS: list[Problem] = [
    _fn(
        "add",
        "Write add(a, b) that returns the sum of two integers.",
        "add",
        [([1, 2], 3), ([-4, 4], 0), ([10, -3], 7), ([0, 0], 0)],
        "def add(a, b):\n    return a + b\n",
    ),
    _fn(
        "square",
        "Write square(n) that returns n multiplied by itself.",
        "square",
        [([3], 9), ([-2], 4), ([0], 0), ([11], 121)],
        "def square(n):\n    return n * n\n",
    ),
    _fn(
        "maximum",
        "Write maximum(xs) that returns the largest number in the non-empty list xs.",
        "maximum",
        [([[1, 5, 3]], 5), ([[-7, -2, -9]], -2), ([[4]], 4), ([[2, 2, 1]], 2)],
        "def maximum(xs):\n    return max(xs)\n",
    ),
    _fn(
        "reverse_string",
        "Write reverse_string(s) that returns s reversed.",
        "reverse_string",
        [(["abc"], "cba"), ([""], ""), (["racecar"], "racecar"), (["ab cd"], "dc ba")],
        "def reverse_string(s):\n    return s[::-1]\n",
    ),
    _fn(
        "count_vowels",
        "Write count_vowels(s) that returns how many characters of s are vowels (a, e, i, o, u; "
        "either case).",
        "count_vowels",
        [(["hello"], 2), (["xyz"], 0), (["AEIOU"], 5), (["Programming"], 3)],
        "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n",
    ),
    _fn(
        "is_even",
        "Write is_even(n) that returns True if the integer n is even, else False.",
        "is_even",
        [([2], True), ([7], False), ([0], True), ([-3], False)],
        "def is_even(n):\n    return n % 2 == 0\n",
    ),
    _fn(
        "sum_list",
        "Write sum_list(xs) that returns the sum of the numbers in the list xs (0 if empty).",
        "sum_list",
        [([[1, 2, 3]], 6), ([[]], 0), ([[-1, 1]], 0), ([[10]], 10)],
        "def sum_list(xs):\n    return sum(xs)\n",
    ),
    _fn(
        "factorial",
        "Write factorial(n) that returns n! for an integer n >= 0.",
        "factorial",
        [([0], 1), ([1], 1), ([5], 120), ([7], 5040)],
        "def factorial(n):\n    r = 1\n    for i in range(2, n + 1):\n        r *= i\n"
        "    return r\n",
    ),
    _fn(
        "is_palindrome",
        "Write is_palindrome(s) that returns True if s reads the same backwards, else False.",
        "is_palindrome",
        [(["level"], True), (["abc"], False), ([""], True), (["abba"], True)],
        "def is_palindrome(s):\n    return s == s[::-1]\n",
    ),
    _fn(
        "fizzbuzz",
        "Write fizzbuzz(n) that returns 'Fizz' if n is divisible by 3, 'Buzz' if by 5, "
        "'FizzBuzz' if by both, else str(n).",
        "fizzbuzz",
        [([3], "Fizz"), ([10], "Buzz"), ([15], "FizzBuzz"), ([7], "7")],
        "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n"
        "        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)\n",
    ),
    _fn(
        "evens",
        "Write evens(xs) that returns the even numbers of the list xs, in order.",
        "evens",
        [([[1, 2, 3, 4]], [2, 4]), ([[]], []), ([[5, 7]], []), ([[0, -2, 3]], [0, -2])],
        "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n",
    ),
    _fn(
        "average",
        "Write average(xs) that returns the arithmetic mean of the non-empty list xs as a float.",
        "average",
        [([[1, 2, 3]], 2.0), ([[5]], 5.0), ([[1, 2]], 1.5), ([[-1, 1, 3]], 1.0)],
        "def average(xs):\n    return sum(xs) / len(xs)\n",
    ),
    _io(
        "io_sum",
        "The input is one line with two integers separated by a space. Print their sum.",
        [("1 2\n", "3\n"), ("-5 5\n", "0\n"), ("100 23\n", "123\n"), ("0 7\n", "7\n")],
        "a, b = map(int, input().split())\nprint(a + b)\n",
    ),
    _io(
        "io_upper",
        "The input is one line of text. Print it in upper case.",
        [("hello\n", "HELLO\n"), ("Mixed Case\n", "MIXED CASE\n"), ("123 ab\n", "123 AB\n")],
        "print(input().upper())\n",
    ),
    _io(
        "io_max",
        "The input is one line of integers separated by spaces. Print the largest.",
        [("3 9 2\n", "9\n"), ("-1 -8\n", "-1\n"), ("5\n", "5\n"), ("4 4 1\n", "4\n")],
        "print(max(map(int, input().split())))\n",
    ),
    _io(
        "io_words",
        "The input is one line of text. Print how many words (separated by spaces) it has.",
        [("a b c\n", "3\n"), ("hello\n", "1\n"), ("one  two\n", "2\n"), ("x y z w\n", "4\n")],
        "print(len(input().split()))\n",
    ),
]

OOD_PROBLEMS: list[Problem] = [
    _fn(
        "char_counts",
        "Write char_counts(s) that returns a dict mapping each character of s to how many times "
        "it occurs.",
        "char_counts",
        [(["aab"], {"a": 2, "b": 1}), ([""], {}), (["xyx"], {"x": 2, "y": 1})],
        "def char_counts(s):\n    d = {}\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n"
        "    return d\n",
    ),
    _fn(
        "most_common",
        "Write most_common(xs) that returns the element of the non-empty list xs that occurs "
        "most often; on a tie, the one that occurs first.",
        "most_common",
        [([[1, 2, 2, 3]], 2), ([["a", "b", "a"]], "a"), ([[5, 6]], 5), ([[7, 8, 8, 7]], 7)],
        "def most_common(xs):\n    return max(xs, key=lambda x: (xs.count(x), -xs.index(x)))\n",
    ),
    _fn(
        "invert",
        "Write invert(d) that returns a dict mapping each value of the dict d to its key "
        "(the values are distinct strings).",
        "invert",
        [([{"a": "x", "b": "y"}], {"x": "a", "y": "b"}), ([{}], {}), ([{"k": "v"}], {"v": "k"})],
        "def invert(d):\n    return {v: k for k, v in d.items()}\n",
    ),
    _fn(
        "collatz_steps",
        "Write collatz_steps(n) that returns how many steps the Collatz rule (n/2 if even, "
        "3n+1 if odd) takes to reach 1 from the integer n >= 1.",
        "collatz_steps",
        [([1], 0), ([2], 1), ([6], 8), ([7], 16)],
        "def collatz_steps(n):\n    k = 0\n    while n != 1:\n"
        "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        k += 1\n    return k\n",
    ),
    _io(
        "io_lines_sum",
        "The first input line holds n. Each of the next n lines holds one integer. Print their "
        "sum.",
        [("3\n1\n2\n3\n", "6\n"), ("1\n-4\n", "-4\n"), ("2\n10\n20\n", "30\n")],
        "n = int(input())\nprint(sum(int(input()) for _ in range(n)))\n",
    ),
    _io(
        "io_grid_count",
        "The first input line holds two integers r and c. The next r lines each hold c "
        "characters, '.' or '#'. Print how many '#' the grid has.",
        [("2 3\n#.#\n...\n", "2\n"), ("1 1\n#\n", "1\n"), ("2 2\n..\n..\n", "0\n")],
        "r, c = map(int, input().split())\nprint(sum(input().count('#') for _ in range(r)))\n",
    ),
    _io(
        "io_balance",
        "The input is one line of commands separated by spaces: 'D x' deposits x, 'W x' "
        "withdraws x (only if the balance allows it). Starting from 0, print the final balance.",
        [("D 10 W 3\n", "7\n"), ("W 5 D 2\n", "2\n"), ("D 1 D 2 W 4\n", "3\n")],
        "t = input().split()\nb = 0\nfor op, x in zip(t[::2], map(int, t[1::2])):\n"
        "    if op == 'D':\n        b += x\n    elif x <= b:\n        b -= x\nprint(b)\n",
    ),
    _io(
        "io_sorted_words",
        "The input is one line of words. Print them sorted alphabetically, one per line.",
        [("b a c\n", "a\nb\nc\n"), ("zeta alpha\n", "alpha\nzeta\n"), ("one\n", "one\n")],
        "for w in sorted(input().split()):\n    print(w)\n",
    ),
]


def problems(split: str) -> list[Problem]:
    """The built-in problems of a split ("id" or "ood")."""
    if split not in ("id", "ood"):
        raise ValueError(f"split must be 'id' or 'ood', got {split!r}")
    return ID_PROBLEMS if split == "id" else OOD_PROBLEMS


def reference_pairs(
    split: str,
    n: int,
    seed: int,
    source: Literal["builtin", "humaneval"] = "builtin",
    setting: str = "warm_start.episodes",
) -> list[tuple[CodingSpec, str]]:
    """`n` distinct problems of `split` with their reference solutions, in an order drawn with
    `seed`. `setting` is what the error tells the user to lower when the set is too small.

    source="humaneval": the in-domain split is HumanEval's fully converted problems; the
    out-of-domain split stays the built-in one (problem kinds HumanEval does not train).
    """
    if source == "humaneval" and split == "id":
        pool = [(t.spec, t.reference) for t in load_humaneval()]
    else:
        pool = [(parse_coding_spec(p["spec"]), str(p["reference"])) for p in problems(split)]
    if n > len(pool):
        raise SpecError(
            f"asked for {n} {split} coding tasks but the {source} set has {len(pool)}; lower "
            f"{setting} to at most that."
        )
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    return [pool[i] for i in order[:n]]


def generate_coding_specs(
    split: str, n: int, seed: int, source: Literal["builtin", "humaneval"] = "builtin"
) -> list[CodingSpec]:
    """`n` distinct problems of `split` (the draw of `reference_pairs`, without solutions)."""
    setting = "environment.num_tasks (or evaluation.num_tasks)"
    return [spec for spec, _ in reference_pairs(split, n, seed, source, setting)]

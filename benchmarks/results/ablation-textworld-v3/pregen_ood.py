"""Fill the TextWorld game cache with the held-out ood split's games (evaluation.seed 1000)
while the warm start trains on the other core: generate_textworld_specs's drafts replayed from
the same rng, generated in its order (game_of is safe when two processes meet)."""
import random, time
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.textworld import game as g

seed = derive_seed(1000, "ood") % 2**31
rng = random.Random(f"textworld-ood-{seed}")
rooms, objects, quest = g._SPLITS["ood"]
drafts = [g.TextWorldSpec(world_size=rng.randint(*rooms), nb_objects=rng.randint(*objects),
                          quest_length=rng.randint(*quest), max_steps=g.MAX_STEPS, seed=rng.randrange(2**31))
          for _ in range(4 * 400 + 8)]
ok, t = 0, time.time()
for i, s in enumerate(drafts):
    if ok == 400:
        break
    try:
        g.game_of(s)
        ok += 1
    except g.SpecError as e:
        print("skip", str(e)[:100], flush=True)
    if i % 50 == 0:
        print(i, ok, round(time.time() - t), flush=True)
print("done", ok, round(time.time() - t), flush=True)

"""Fill the TextWorld game cache with the env model warm start's games, from the end of its list
(the warm start walks generate_textworld_specs's drafts from the start; game_of is safe when
two processes meet). The drafts are replayed from the same rng without generating them."""
import random, time
from rlanything_core.run.config import load_config
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.textworld import game as g

config = load_config("configs/ablation-textworld.yaml")
ws = config.env_model.warm_start
n = -(-ws.episodes // ws.episodes_per_task)
seed = derive_seed(config.seed, "warm-start", "env_model") % 2**31
rng = random.Random(f"textworld-id-{seed}")
rooms, objects, quest = g._SPLITS["id"]
drafts = [g.TextWorldSpec(world_size=rng.randint(*rooms), nb_objects=rng.randint(*objects),
                          quest_length=rng.randint(*quest), max_steps=g.MAX_STEPS, seed=rng.randrange(2**31))
          for _ in range(n)]
cached = lambda s: (g.cache_root() / g.spec_hash(s) / "meta.json").is_file()
print(n, "drafts,", sum(map(cached, drafts)), "cached", flush=True)
t = time.time()
for i, s in enumerate(reversed(drafts)):
    if cached(s):
        if cached(drafts[n - 2 - i]) if i + 1 < n else True:
            print("met the warm start at", n - 1 - i, flush=True); break
        continue
    try:
        g.game_of(s)
    except Exception as e:
        print("skip", type(e).__name__, str(e)[:100], flush=True)
    if i % 50 == 0:
        print(i, round(time.time() - t), flush=True)

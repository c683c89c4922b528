"""Master seeds of the randomised system tests (file fuzz, kill -9 cycles, EMFILE injection).

A CI run must decide the same way every time it runs the same code, so each test has a fixed
default seed; `<NAME>=<n>` replays a run, and `<NAME>=random` draws a fresh one to explore with.
The seed in use is printed either way, and every failure names it.
"""
import os
import random

DEFAULT_SEED = 20261125


def master_seed(env_name, default=DEFAULT_SEED):
    """The seed named by the environment variable env_name ("random" draws one), else default."""
    raw = os.environ.get(env_name, "").strip()
    if raw.lower() == "random":
        seed = random.SystemRandom().randrange(2**32)
    elif raw:
        try:
            seed = int(raw)
        except ValueError:
            raise SystemExit(f"{env_name}={raw!r}: expected an integer or 'random'") from None
    else:
        seed = default
    print(f"{env_name}={seed}")
    return seed

"""The generation benchmark's prompts: prompts(n) -> n ASCII prompts of 16 to 200 bytes, the same
list for every runtime (a fixed generator, lengths spread evenly over the range)."""
import random

WORDS = ("the of and to in is that it was for on are as with his they at be this from have or by one had "
         "not but what all were when we there can an your which their said if do will each about how up out "
         "them then she many some so these would other into has more her two like him see time could no make "
         "than first been its who now people my made over did down only way find use may water long little").split()


def prompts(n, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = 16 + (184 * i) // max(1, n - 1)  # 16 .. 200
        words = []
        while len(" ".join(words)) < length:
            words.append(rng.choice(WORDS))
        out.append(" ".join(words)[:length])
    rng.shuffle(out)
    return out

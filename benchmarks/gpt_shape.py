"""The GPT shape flags that gpt_step takes, shared by the scripts that drive it
(compare_torch.py, profile_step.py): one definition of the flags and their defaults,
one way to hand them on, and the taskset prefix that pins n threads to cores 0..n-1."""


def add_shape_args(ap, warmup=3):
    """Adds --layers --d --heads --seq --batch --vocab --steps --warmup to parser ap."""
    for name, default in (("--layers", 8), ("--d", 256), ("--heads", 4), ("--seq", 256),
                          ("--batch", 4), ("--vocab", 256), ("--steps", 10),
                          ("--warmup", warmup)):
        ap.add_argument(name, type=int, default=default)


def shape_flags(args):
    """The shape flags of parsed args, as gpt_step's (and torch_gpt_step.py's) arguments."""
    out = []
    for name in ("layers", "d", "heads", "seq", "batch", "vocab", "steps", "warmup"):
        out += ["--" + name, str(getattr(args, name))]
    return out


def pin(threads):
    """taskset prefix: n threads on cores 0..n-1."""
    return ["taskset", "-c", ",".join(str(i) for i in range(threads))]

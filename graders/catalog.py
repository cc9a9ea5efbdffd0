"""The exercises, each described once: everything else (the runner's order, which children
import JAX, the README's table, the test lists) reads or is checked against this table.

tests/test_catalog.py checks that exercises/, reference/, graders/, tests/corpus/ and the
README agree with it, as rustlings' `dev check` does for its info.toml.
"""

from dataclasses import dataclass
from pathlib import Path

GRADERS_DIR = Path(__file__).resolve().parent
ROOT = GRADERS_DIR.parent


@dataclass(frozen=True)
class Exercise:
    id: str
    module: str  # exercises/<module>.py, reference/<module>.py, graders/exercises/<module>/checks.py
    title: str  # the report's name for it
    source: str  # where in the source material it comes from, as the package names it
    # Typical cold grading seconds (make bench, 2 CPUs): the runner starts the longest first so
    # that, graded in parallel, the last one to finish is not the slowest.
    cost: float
    # The libraries its grading process and its solution use: the fork server imports these
    # (for every exercise of a run) once, before the first child is forked.
    libraries: tuple[str, ...] = ("jax",)
    # An exercise whose answer is plain data (the quiz's ANSWERS): under --sandbox, a confined
    # process only reads these values, and the checks run where no learner code ever ran.
    data: tuple[str, ...] = ()
    # make bench's edit loop, the learner's-loop issue's measure: (text, replacement) pairs that
    # put a `* 1.0` into each computation of the reference that ends up in a compiled program,
    # so that every program the learner writes changes and misses the compilation cache (the
    # graders' own still hit it). tests/test_catalog.py checks that each text occurs once.
    edit: tuple[tuple[str, str], ...] = ()


_ALL = (
    Exercise("ex1", "ex1_token_accumulation", "token-weighted gradient accumulation",
             "the chapter's Exercise 1", cost=1.7,
             edit=(("(jnp.tanh(x @ w) - y) ** 2", "(jnp.tanh(x @ w) - y) ** 2 * 1.0"),)),
    Exercise("ex2", "ex2_sqrt_checkpointing", "sqrt(L) grouped checkpointing",
             "the chapter's Exercise 2", cost=6.5,
             edit=(("return x + jnp.tanh(x @ w), None", "return x + jnp.tanh(x @ w) * 1.0, None"),)),
    Exercise("ex3", "ex3_fsdp_shard_map", "FSDP by hand with shard_map",
             "the chapter's Exercise 3", cost=1.2,
             edit=(("@ w2 - y_blk) ** 2)", "@ w2 - y_blk) ** 2 * 1.0)"),)),
    Exercise("ex4", "ex4_master_weights", "fp32 master weights",
             "the chapter's Exercise 4", cost=0.8, libraries=("jax", "ml_dtypes"),
             edit=(("return (w - lr * grad)", "return (w * 1.0 - lr * grad)"),
                   ("return w - jnp.float32(lr * grad)", "return w * 1.0 - jnp.float32(lr * grad)"))),
    Exercise("ex5", "ex5_linen_checkpoint", "Linen nn.checkpoint",
             "a Linen checkpointing task", cost=5.1, libraries=("jax", "flax.linen"),
             edit=(("return nn.Dense(self.features)(x)", "return nn.Dense(self.features)(x) * 1.0"),)),
    Exercise("ex6", "ex6_nnx_block_remat", "per-block nnx.remat",
             "an NNX rematerialization tutorial and the chapter's section 6.10", cost=19.3,
             libraries=("jax", "flax.nnx"),
             edit=(("return h + self.fc2(jax.nn.gelu(self.fc1(self.ln2(h))))",
                    "return h + self.fc2(jax.nn.gelu(self.fc1(self.ln2(h)))) * 1.0"),
                   ("return jnp.mean((model(x) - y) ** 2)", "return jnp.mean((model(x) - y) ** 2) * 1.0"))),
    Exercise("ex7", "ex7_megatron_tp", "Megatron tensor parallelism",
             "the chapter's section 6.8", cost=2.4, libraries=("jax", "optax"),
             edit=(("h = jax.nn.relu(x @ w1)", "h = jax.nn.relu(x @ w1) * 1.0"),
                   ("partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk", "partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk * 1.0"))),
    Exercise("ex8", "ex8_loss_scaling", "dynamic loss scaling in fp16",
             "the chapter's section 6.7", cost=3.6, libraries=("jax", "optax"),
             edit=(("lambda g: g / scale", "lambda g: g / scale * 1.0"),
                   ("jnp.maximum(ls.scale / factor, min_scale)", "jnp.maximum(ls.scale / factor * 1.0, min_scale)"))),
    Exercise("ex9", "ex9_zero1_adamw", "ZeRO-1 with AdamW by hand",
             "the chapter's section 6.9", cost=5.5, libraries=("jax", "optax"),
             edit=(("return jnp.mean((mlp(params, x) - y) ** 2)", "return jnp.mean((mlp(params, x) - y) ** 2) * 1.0"),
                   ("(jnp.sqrt(v / c2) + eps)", "(jnp.sqrt(v / c2) + eps) * 1.0"))),
    # ex10's learner code compiles nothing of its own (save and restore only move the grader's state),
    # so its edit changes the reference's copy of the stub's training step, which no grading compiles:
    # its edit loop is a warm run.
    Exercise("ex10", "ex10_orbax_resume", "resuming from Orbax on another mesh",
             "the chapter's section 6.3", cost=6.5, libraries=("jax", "flax.nnx", "optax", "orbax.checkpoint"),
             edit=(("return jnp.mean((model(x, rngs) - y) ** 2)", "return jnp.mean((model(x, rngs) - y) ** 2) * 1.0"),)),
    Exercise("quiz", "quiz", "quiz", "the chapter's quiz, the tutorial's bugs, bf16's range and Explicit-axis matmuls",
             cost=0.3, libraries=(), data=("ANSWERS",)),
)
EXERCISES: dict[str, Exercise] = {e.id: e for e in _ALL}

EXERCISES_DIR = GRADERS_DIR / "exercises"  # one folder per exercise: exercise_dir()


def edited(ex_id: str, text: str, times: int = 1) -> str:
    """A module's text with the exercise's bench edit applied (see Exercise.edit), its `* 1.0`
    repeated `times` times: each count makes programs of their own."""
    for old, new in EXERCISES[ex_id].edit:
        text = text.replace(old, new.replace(" * 1.0", " * 1.0" * times), 1)
    return text


def needs_jax(ex_id: str) -> bool:
    return "jax" in EXERCISES[ex_id].libraries


def module_name(ex_id: str) -> str:
    return EXERCISES[ex_id].module


def title(ex_id: str) -> str:
    return EXERCISES[ex_id].title


def exercise_dir(ex_id: str) -> Path:
    """graders/exercises/<module>/: the exercise's checks, probes, own helpers and data."""
    return EXERCISES_DIR / module_name(ex_id)


def grader_file(ex_id: str) -> Path:
    """The exercise's checks: they draw the inputs and decide every verdict (the judge's side)."""
    return exercise_dir(ex_id) / "checks.py"


def probes_file(ex_id: str) -> Path:
    """The exercise's probes (graders/child/probe_channel.py): the only grader code that touches the learner's."""
    return exercise_dir(ex_id) / "probes.py"


def probes_module(ex_id: str) -> str:
    return f"graders.exercises.{module_name(ex_id)}.probes"


def quiz_key_file() -> Path:
    return exercise_dir("quiz") / "key.json"


def submission_secret_file() -> Path:
    """The autograder's secret (made by its setup.sh when seeds are drawn per submission): with a
    hash of the submission, it makes each submission's seed (graders/course/bundle.py)."""
    return ROOT / ".cache" / "submission_secret"


def public_data_file(ex_id: str) -> Path:
    """The students' copy only: the expected values its checks need, recorded on the public seed
    when the copy was made (graders/kit/expected.py; the name is that module's PUBLIC_FILE)."""
    return exercise_dir(ex_id) / "public.wire"


def public_seed_file() -> Path:
    """The students' copy only: the seed its expected values were recorded on, which it grades with."""
    return GRADERS_DIR / "public_seed"


def public_seed() -> int | None:
    """The students' copy's public seed; None in the full package."""
    try:
        return int(public_seed_file().read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def secrets() -> tuple[Path, ...]:
    """Files only the trusted side may read: a release leaves them out, and a sandboxed grading
    process sees them empty."""
    return (quiz_key_file(), submission_secret_file())


def hidden_from_worker() -> list[Path]:
    """What the confined worker must not see (graders/child/sandbox.py): every exercise's checks,
    which hold how inputs are drawn and every expected value, and their bytecode, whether it is
    written yet or not (the folder whole: the judge may write it after the worker starts)."""
    hidden = []
    for ex_id in EXERCISES:
        checks = grader_file(ex_id)
        if checks.is_file():
            hidden.append(checks)
        if public_data_file(ex_id).is_file():  # the students' copy: the checks' recorded expected values
            hidden.append(public_data_file(ex_id))
        hidden.append(checks.parent / "__pycache__")
    return hidden


def has_probes(ex_id: str) -> bool:
    return probes_file(ex_id).is_file()


def available() -> list[str]:
    """Exercise ids whose grader exists, in catalog order."""
    return [ex_id for ex_id in EXERCISES if grader_file(ex_id).is_file()]


def longest_first(ids) -> list[str]:
    return sorted(ids, key=lambda i: -EXERCISES[i].cost)

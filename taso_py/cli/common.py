"""What every `taso` command shares: error reporting, logging, JSON output, common options."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from taso_py.errors import InputError, TasoError
from taso_py.graph import Graph
from taso_py.onnx_io import OnnxModel, load_model, parse_input_shapes, save_model
from taso_py.onnx_io.exporter import save_copy
from taso_py.runtime import DEFAULT_RTOL, Comparison, check_equivalent
from taso_py.search.backtracking import Settings
from taso_py.search.settings import EqsatSettings

OUT_OF_MEMORY = "out of memory: the model needs more memory than this machine has"


class TasoGroup(click.Group):
    """Turns every failure into one line on stderr and the CLI contract's exit code:
    0 success, 1 a "no" answer, 2 bad input or usage; never a traceback (TASO_DEBUG=1 shows it)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as e:
            where = f"taso {e.ctx.command_path.partition(' ')[2]}".strip() if e.ctx else "taso"
            fail(f"{e.format_message()} (see '{where} --help')", 2)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except click.Abort:
            fail("aborted", 130)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        # numpy's RuntimeWarnings on a damaged model's values (NaN casts) would break the one-line contract
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return super().invoke(ctx)
        except TasoError as e:
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except MemoryError:  # a model asking for more than this machine has (huge dims)
            fail(OUT_OF_MEMORY, 2)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except Exception as e:  # a bug in taso-py: still one line, the traceback on request
            if isinstance(e, ValueError) and "array is too big" in str(e):  # numpy: past the address space
                fail(OUT_OF_MEMORY, 2)
            if os.environ.get("TASO_DEBUG"):
                raise
            fail(f"internal error: {type(e).__name__}: {e} (set TASO_DEBUG=1 for the traceback)", 3)


def fail(message: str, code: int) -> None:
    click.echo(f"taso: error: {message.splitlines()[0] if message else 'failed'}", err=True)
    sys.exit(code)


def setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="taso: %(levelname)s: %(message)s", stream=sys.stderr, force=True)


def emit_json(document: dict) -> None:
    """The one machine-readable document a --json command prints on stdout."""
    click.echo(json.dumps(document, indent=2, default=str))


def input_shape_option(f: Callable) -> Callable:
    return click.option(
        "--input-shape", "input_shapes", multiple=True, metavar="NAME=D1,D2,...",
        help="Static shape for an input with dynamic dimensions (repeatable), e.g. input=1,3,224,224.",
    )(f)


def check_options(f: Callable) -> Callable:
    """--no-check, --rtol, --atol: the equivalence check before a rewritten model is written."""
    f = click.option("--atol", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
                     help="An output also passes when max|a-b| <= ATOL (for outputs that are all zeros).")(f)
    f = click.option("--rtol", type=click.FloatRange(min=0.0), default=DEFAULT_RTOL, show_default=True,
                     help="The check: per output, max|a-b| / max|a| <= RTOL, on two seeded random input sets.")(f)
    return click.option("--no-check", is_flag=True, help="Skip the ONNX Runtime comparison with the original.")(f)


def search_option(default: str) -> Callable[[Callable], Callable]:
    """`--search`: eqsat for `taso optimize`; backtrack for `taso compile`, whose cost model compiles and
    times a kernel per new operator, which eqsat asks for every e-node of (the α-search only for the
    graphs it visits): 55 s instead of a few on eight matmuls of one input, on a cold cache."""
    return click.option("--search", type=click.Choice(["backtrack", "eqsat"]), default=default, show_default=True,
                        help="eqsat: equality saturation (egglog) with greedy and integer-program extraction, "
                             "5 s unless --timeout says otherwise; backtrack: TASO's α-relaxed search.")


def search_settings(search: str, alpha: float = 1.05, budget: int = 1000, timeout: float | None = None,
                    seed: int = 0, rounds: int = EqsatSettings.rounds) -> Settings | EqsatSettings:
    """The settings that choose the search (`optimizer.optimize` dispatches on their type); `timeout`,
    when given, is either search's time bound (for eqsat, saturation and extraction together), and
    each has its own default: equality saturation is done in seconds where the α-search needs its 30."""
    if search == "eqsat":
        return EqsatSettings(rounds=rounds) if timeout is None else EqsatSettings(timeout=timeout, rounds=rounds)
    return Settings(alpha, budget, Settings.timeout if timeout is None else timeout, seed)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")(f)


def model_argument(f: Callable) -> Callable:
    return click.argument("model", type=click.Path(path_type=Path))(f)


def load(model: Path, input_shapes: tuple[str, ...]) -> OnnxModel:
    return load_model(model, parse_input_shapes(input_shapes))


class CheckFailed(TasoError):
    exit_code = 1


def save_checked(original: Path, model: OnnxModel, target: Path, what: str, check: bool, rtol: float, atol: float,
                 seed: int = 0, then: Callable[[Path], None] | None = None, copy: bool = False
                 ) -> Comparison | None:
    """Write `model` to `target` atomically, but only once ORT gives it the original's outputs on
    two seeded random input sets by `runtime.check_equivalent` (unless `check` is off) and `then`,
    given the staged file, has not raised; the comparison, or None when unchecked. With `copy`, what
    is written is the original file's bytes (`model`, the original imported, gives the check its
    input shapes): checked all the same, so every report says what ORT made of the written file."""
    result: list[Comparison] = []

    def verify(staged: Path) -> None:
        if check:
            comparison = check_equivalent(original, staged, model.graph, seed, rtol, atol,
                                          truth=reference_graph(original, model.graph))
            result.append(comparison)
            if not comparison.ok:
                raise CheckFailed(f"{what} model differs from the original on {comparison.describe()}; "
                                  "nothing written")
        if then is not None:
            then(staged)

    publish = verify if check or then else None
    if copy:
        save_copy(original, target, before_publish=publish)
    else:
        save_model(model, target, before_publish=publish)
    return result[0] if result else None


def reference_graph(original: Path, like: Graph) -> Callable[[], Graph]:
    """The original model's graph, imported when called, with the input shapes `like` has (those
    `--input-shape` fixed): the truth `runtime.arbitrate` evaluates in float64."""
    shapes = {n.attrs.name: n.attrs.type.shape for n in like.inputs}
    return lambda: load_model(original, shapes).graph


def output_path(model: Path, out: Path | None, suffix: str) -> Path:
    """The output file: `out`, or MODEL with `suffix`; never the input itself."""
    target = out if out is not None else model.with_name(model.stem + suffix)
    if target.resolve() == model.resolve():
        raise InputError(f"refusing to overwrite the input model {model}; choose another -o")
    return target

"""Error types. Every user-facing failure is a `TasoError` whose message is one line.

The CLI turns a `TasoError` into that line on stderr and its `exit_code`; anything else
is a bug in taso-py and is reported as an internal error.
"""

import re

# where in its sources ONNX Runtime raised, and the C++ signature of the function: before the reason,
# and long enough that a capped line would end before it ("/onnxruntime_src/.../model.cc:202
# onnxruntime::Model::Model(onnx::ModelProto&&, ...) Unsupported model IR version: ...")
_ORT_SOURCE = re.compile(r"/onnxruntime_src/\S+:\d+ (?:[\w:~<>]+\([^()]*\)(?: const)? )?(?:\[with [^\]]*\] )?")


class TasoError(Exception):
    """Base class of the errors the CLI reports as one line."""

    exit_code = 2


class InputError(TasoError):
    """Bad input: a missing or malformed file, an unsupported model, a wrong argument."""


class ShapeError(InputError):
    """An operator's inputs do not fit its shape rule; the message names the operator."""


class AttrError(InputError):
    """An operator attribute is missing, of the wrong type or out of range."""


class GraphError(InputError):
    """The graph IR is not well formed (cycle, dangling reference, stale type)."""


class Unsupported(TasoError):
    """An ONNX construct outside the algebra: the importer keeps such a node opaque."""


def first_line(error: BaseException) -> str:
    """The first line of another library's error message (ORT's and onnx's run to pages), without
    ORT's source locations, capped."""
    text = str(error).strip() or type(error).__name__
    return _ORT_SOURCE.sub("", text.splitlines()[0])[:300]

"""What every baseline library module shares: the prepared call, candidate collection, descriptor ownership
and PyTorch on CuPy's stream. GPU libraries are imported inside functions, so this imports without a GPU."""

from __future__ import annotations

import contextlib
import functools
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from cupy import ndarray as Array
else:
    Array = Any

log = structlog.get_logger(__name__)

_TORCH_STREAMS: dict[tuple[int, int], Any] = {}


@dataclass
class BaselineCall:
    """One prepared vendor-library call; `run` only enqueues work on the current CuPy stream. `library` is the
    registry's name; `output` is the array it writes, the family's single output (a family with several
    outputs would make this a mapping)."""

    name: str
    library: str
    config: str
    run: Callable[[], None]
    output: Array
    prepare_note: str = ""
    # host seconds from the first way tried to this one built and run once (failed ways included)
    build_seconds: float = 0.0


@dataclass(frozen=True)
class Candidate:
    """One configuration: its stable name and the ways to build it, tried in order until one works."""

    name: str
    variants: tuple[Callable[[], BaselineCall], ...]


def candidate(name: str, build: Callable[..., BaselineCall], *args: Any) -> Candidate:
    """A candidate with one way to build it: `build(name, *args)`."""
    return Candidate(name, (functools.partial(build, name, *args),))


def collect(candidates: Sequence[Candidate]) -> list[BaselineCall]:
    """Keeps, per candidate, the first variant that builds and survives one synchronized trial run. Rejections
    are expected (libraries support only some dtype/algorithm/layout combinations): logged at debug level."""
    import cupy

    calls: list[BaselineCall] = []
    for option in candidates:
        start = time.perf_counter()
        for build in option.variants:
            try:
                call = build()
                call.run()
                cupy.cuda.get_current_stream().synchronize()
            except Exception as exc:  # any failure disqualifies the configuration
                log.debug("baseline_skipped", candidate=option.name, error=repr(exc))
                continue
            call.build_seconds = time.perf_counter() - start
            calls.append(call)
            break
    return calls


class Owner:
    """Keeps alive what raw pointers in library descriptors refer to, and destroys the descriptors.

    Descriptors hold bare device/host addresses, so the arrays behind them must live exactly as long as the
    call. Destruction is skipped at interpreter exit, when the CUDA context may already be gone."""

    def __init__(self) -> None:
        self._objects: list[Any] = []
        self._descriptors: list[tuple[Callable[[int], None], int]] = []
        finalizer = weakref.finalize(self, _destroy_descriptors, self._descriptors)
        finalizer.atexit = False

    def keep(self, *objects: Any) -> None:
        self._objects.extend(objects)

    def descriptor(self, destroy: Callable[[int], None], handle: int) -> int:
        self._descriptors.append((destroy, handle))
        return handle


def _destroy_descriptors(descriptors: list[tuple[Callable[[int], None], int]]) -> None:
    """Best-effort release at garbage collection; a failure here has no one left to report to."""
    for destroy, handle in reversed(descriptors):
        with contextlib.suppress(Exception):
            destroy(handle)


@dataclass
class OwnedLaunch:
    """The `run` callable: launches while holding the owner, so buffers outlive every launch."""

    owner: Owner
    launch: Callable[[], None]

    def __call__(self) -> None:
        self.launch()


@functools.cache
def torch_module() -> ModuleType | None:
    """torch if it imports and sees a GPU; otherwise None, and its candidates are not offered."""
    try:
        import torch
    except Exception as exc:  # torch is optional
        log.debug("torch_unavailable", error=repr(exc))
        return None
    if not torch.cuda.is_available():
        log.debug("torch_unavailable", error="torch.cuda.is_available() is False")
        return None
    return torch


def _torch_stream(torch: ModuleType) -> Any:
    """Torch's handle on the current CuPy stream, so torch work is ordered and timed with the harness."""
    import cupy

    device = cupy.cuda.Device().id
    pointer = cupy.cuda.get_current_stream().ptr
    stream = _TORCH_STREAMS.get((device, pointer))
    if stream is None:
        torch_device = torch.device("cuda", device)
        # Pointer 0 is the legacy default stream, which is also torch's default stream.
        stream = (torch.cuda.default_stream(torch_device) if pointer == 0
                  else torch.cuda.ExternalStream(pointer, device=torch_device))
        _TORCH_STREAMS[(device, pointer)] = stream
    return stream


def torch_view(torch: ModuleType, array: Array, bf16: bool = False) -> Any:
    """Zero-copy torch tensor over a CuPy array; bf16 raw bits go through int16 to a bfloat16 view."""
    import cupy

    return torch.from_dlpack(array.view(cupy.int16)).view(torch.bfloat16) if bf16 else torch.from_dlpack(array)


def torch_run(torch: ModuleType, owner: Owner, compute: Callable[[], None]) -> OwnedLaunch:
    """A `run` that does the torch work on the current CuPy stream (where the harness's CUDA events are)."""

    def launch() -> None:
        with torch.cuda.stream(_torch_stream(torch)):
            compute()

    return OwnedLaunch(owner, launch)

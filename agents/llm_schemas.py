"""What a model fills in, one schema per agent. Each converts into the offline policy's schema.

The answers stay small on purpose: the planner picks from the strategy vocabulary (features, baselines
and the minimum speedup come from the spec, not the model); the coder either re-parameterises a
reference kernel or writes a new one as data under the kernel contract; the reviewer names one
bottleneck and one direction.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from sparseditto.tools.contract import Workspace

_IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"


class StrategyAnswer(BaseModel):
    kernel: str = Field(description="a kernel name from the strategy vocabulary")
    start: dict[str, int] = Field(description="first value of every parameter of the kernel, from its allowed values")
    space: dict[str, list[int]] = Field(default_factory=dict,
                                        description="values to search per parameter (allowed values only); omitted parameters search all")
    why: str = Field(description="one sentence: why this strategy fits these matrix features")


class PlanAnswer(BaseModel):
    """The planner's answer: strategies in the order to try them, and when to stop searching."""

    strategies: list[StrategyAnswer] = Field(min_length=1, max_length=4)
    target_speedup: float = Field(ge=1.0, le=20.0, description="speedup over the best baseline at which to stop searching")
    notes: str = ""


class ReferenceChoice(BaseModel):
    kernel: str = Field(description="a reference kernel's name")
    params: dict[str, int] = Field(description="a value for every parameter of that kernel, from its allowed values")


class LaunchAnswer(BaseModel):
    entry: str = Field(pattern=_IDENT, description='an extern "C" __global__ function of the source')
    grid: list[str] = Field(min_length=3, max_length=3, description="x, y, z as integer expressions")
    block: list[str] = Field(min_length=3, max_length=3, description="x, y, z as integer expressions")
    shared_bytes: str = Field("0", description="dynamic shared memory in bytes, an integer expression")
    args: list[str] = Field(description="the kernel's arguments in order: array and symbol names of the contract")


class NewKernel(BaseModel):
    name: str = Field(pattern=_IDENT, description="a new name, not one of the reference kernels")
    source: str = Field(description="CUDA C++ device code only; the prelude is included before it")
    parameters: dict[str, int] = Field(default_factory=dict, description="compile-time constants, UPPER_CASE names")
    launches: list[LaunchAnswer] = Field(min_length=1, description="the kernels to launch, in order")
    workspace: dict[str, Workspace] = Field(default_factory=dict, description="scratch buffers by name")
    preparation: str | None = Field(None, description="one of the contract's one-time preparations, or null")


class CoderAnswer(BaseModel):
    """The coder's answer: exactly one of `reference` or `new_kernel`."""

    change: str = Field(description="one sentence: what this candidate changes and why, given the feedback")
    reference: ReferenceChoice | None = None
    new_kernel: NewKernel | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CoderAnswer:
        if (self.reference is None) == (self.new_kernel is None):
            raise ValueError("give exactly one of reference or new_kernel")
        return self


class ReviewAnswer(BaseModel):
    """The reviewer's answer: one decision, one bottleneck, one direction."""

    decision: Literal["accept", "revise", "stop"] = Field(
        description="accept the best kernel so far, revise with one change, or stop the search")
    bottleneck: str = Field(description="the one bottleneck or failure of the last candidate, with its evidence")
    direction: str = Field("", description="for revise: the one change the coder should make next")
    next: ReferenceChoice | None = Field(None, description="optional: a reference kernel and parameters that make that change")

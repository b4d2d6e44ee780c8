"""The uncompiled graph. Callers compile it with their own checkpointer (tests, run_pipeline) or none (Studio)."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from sparseditto.graph import nodes
from sparseditto.graph.context import PipelineContext
from sparseditto.graph.routing import after_human, after_review
from sparseditto.graph.state import PipelineInput, PipelineState

builder = StateGraph(PipelineState, context_schema=PipelineContext, input_schema=PipelineInput)
builder.add_node("planner", nodes.planner)
builder.add_node("retriever", nodes.retriever)
builder.add_node("coder", nodes.coder)
builder.add_node("tool", nodes.tool)
builder.add_node("reviewer", nodes.reviewer)
builder.add_node("human_gate", nodes.human_gate)
builder.add_node("finalize", nodes.finalize)
builder.add_edge(START, "planner")
builder.add_edge("planner", "retriever")
builder.add_edge("retriever", "coder")
builder.add_edge("coder", "tool")
builder.add_edge("tool", "reviewer")
builder.add_conditional_edges("reviewer", after_review, ["coder", "human_gate", "finalize"])
builder.add_conditional_edges("human_gate", after_human, ["coder", "finalize"])
builder.add_edge("finalize", END)

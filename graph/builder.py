"""The uncompiled graph. Callers compile it with their own checkpointer (tests, run_pipeline) or none (Studio)."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from sparseditto.graph import nodes
from sparseditto.graph.context import PipelineContext
from sparseditto.graph.gate import human_gate
from sparseditto.graph.routing import after_human, after_review
from sparseditto.graph.state import PipelineInput, PipelineState


def make_builder(context_schema: type[PipelineContext] = PipelineContext) -> StateGraph:
    """The graph, uncompiled; `context_schema` is PipelineContext or a subclass of it (graph/studio.py's)."""
    graph = StateGraph(PipelineState, context_schema=context_schema, input_schema=PipelineInput)
    graph.add_node("planner", nodes.planner)
    graph.add_node("retriever", nodes.retriever)
    graph.add_node("coder", nodes.coder)
    graph.add_node("tool", nodes.tool)
    graph.add_node("reviewer", nodes.reviewer)
    graph.add_node("human_gate", human_gate)
    graph.add_node("finalize", nodes.finalize)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "retriever")
    graph.add_edge("retriever", "coder")
    graph.add_edge("coder", "tool")
    graph.add_edge("tool", "reviewer")
    graph.add_conditional_edges("reviewer", after_review, ["coder", "human_gate", "finalize"])
    graph.add_conditional_edges("human_gate", after_human, ["coder", "finalize"])
    graph.add_edge("finalize", END)
    return graph


builder = make_builder()

"""The graph LangGraph Studio serves (`langgraph dev`): compiled without a checkpointer, the server brings its own.

Start a run with input {"spec": {...}, "on_budget": "ask"}; the spec is validated like everywhere else.
"""

from sparseditto.graph.builder import builder

graph = builder.compile(name="sparseditto")

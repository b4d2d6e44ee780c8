"""The LangGraph state machine: state, context, nodes, routing and the builder."""

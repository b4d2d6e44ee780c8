"""Reference kernels (and, later, docs and the experience store) that the agents build on."""

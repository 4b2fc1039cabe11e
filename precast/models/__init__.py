"""Models on disk: the layout of a model registry folder (`layout`), shared by the worker that
serves from it and the operator tools that change it."""

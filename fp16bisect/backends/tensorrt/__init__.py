"""TensorRT: the API names used (api), layer pins for weakly typed builds (pins), engine build and
run through Polygraphy (engine), and the backend that turns a plan into an engine's outputs (backend)."""

"""TensorRT: importing TensorRT and pointing Polygraphy at it (load), the GPU and CUDA (device), layer pins for weakly
typed builds (pin), engine build and run through Polygraphy (engine), reading a built engine's layers to check the
pins (inspection), and the backend that turns a plan into an engine's outputs (backend)."""

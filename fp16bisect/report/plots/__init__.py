"""The report's plots as inline SVG, one module each with a ``plot`` returning ``(svg, caption)``: node_error,
magnitudes, trace, headroom; svg is the canvas they draw on (SVG written by fp16bisect: scales, marks, ticks,
legend, text), figure what else they share (colours, decade ticks, labels placed where they hide nothing)."""

# the figures' ids on the page (part of the contract: tests and links look for them), also the salt of their SVG ids
PLOT_NODE_ERROR = "plot-node-error"
PLOT_MAGNITUDES = "plot-magnitudes"
PLOT_TRACE = "plot-trace"
PLOT_HEADROOM = "plot-headroom"

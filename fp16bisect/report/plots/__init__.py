"""The report's three plots, one module each, every one a ``plot`` function returning ``(svg, caption)``.

``node_error``: each candidate's error against FP32 along topological order (all FP16, and with the
overrides when there is a plan), the nodes kept in FP32 shaded. ``magnitudes``: every float tensor's
FP32 magnitude against the FP16 limits. ``trace``: the plan size of each evaluation of a search,
passing or failing, by phase. A caption says what a log scale cannot show (zeros, inf/NaN) and names
the nodes that matter. ``figure``: what they share (canvas, SVG export, ticks, label placement).
"""

# the figures' ids on the page (part of the contract: tests and links look for them), also the salt of their SVG ids
PLOT_NODE_ERROR = "plot-node-error"
PLOT_MAGNITUDES = "plot-magnitudes"
PLOT_TRACE = "plot-trace"

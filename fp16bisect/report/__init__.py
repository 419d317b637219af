"""What people read: console output (console), the report's data gathered from a run (data), and the
self-contained HTML page (html)."""

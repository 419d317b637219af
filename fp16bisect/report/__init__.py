"""What people read: console output (console), the report's data packed from a run's results (data), the
self-contained HTML page (html), its plots (plots/) and how its values read (formatting)."""

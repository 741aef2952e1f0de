"""sandboxes package."""

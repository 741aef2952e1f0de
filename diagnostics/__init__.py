"""diagnostics package."""

"""trainer_backend package."""

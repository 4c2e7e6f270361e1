"""What every service shares at its edges: config, logs, metrics, health, status mapping."""

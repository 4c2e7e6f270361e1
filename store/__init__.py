"""Persistence adapters: users and conversations. I/O only; the rules live in domain/."""

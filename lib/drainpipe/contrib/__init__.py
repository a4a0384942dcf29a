"""Integrations with web frameworks; each imports its framework only when used."""

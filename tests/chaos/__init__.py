"""The chaos suite (issue 19): drainpipe driven as a hostile environment would drive it.

``tests/chaos`` is the CI-sized run; ``scripts/chaos`` the long one (docs/chaos.md)."""

"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = ()

__all__ = []

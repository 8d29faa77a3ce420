"""Low-rank attention (survey §4.4): the n × m attention matrix replaced by a product of thin factors.

Conventions shared by the family's registry entries: every random draw and learned parameter is an
option of ``apply``, drawn from ``rng`` when it is not given and returned with
``return_draws=True``; ``return_weights=True`` gives the effective n × m matrix W with
out = W v exactly (its rows need not sum to 1 nor be non-negative: a pseudoinverse has signs).
"""

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = ()

__all__ = []

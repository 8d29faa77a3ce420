"""Catalogue records, one module per family; ``refattn.registry`` lists them in order."""

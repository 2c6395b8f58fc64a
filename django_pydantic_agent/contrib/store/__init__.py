"""Reference models, Default* stores, commands and admin (add to ``INSTALLED_APPS``).

This module imports no models, so it is safe to import before ``django.setup()``.
"""

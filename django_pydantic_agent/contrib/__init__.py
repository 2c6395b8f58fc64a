"""Opt-in Django apps that ship models; add them to ``INSTALLED_APPS`` to use them."""

"""This repository's program: its config model, the components' arguments wired from it, and the offline preview.

``__main__.py`` (what ``pulumi up`` runs) composes the components from here; nothing else imports it.
"""

"""A minimal Django project using cronbase (examples/django_project/README section: Django)."""

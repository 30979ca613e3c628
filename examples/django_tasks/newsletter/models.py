"""A newsletter's subscribers."""

from django.db import models


class Subscriber(models.Model):
    email = models.EmailField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    welcomed_at = models.DateTimeField(null=True)
    crm_synced_at = models.DateTimeField(null=True)

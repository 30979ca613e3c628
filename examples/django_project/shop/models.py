"""An order, and an hourly summary of orders."""

from django.db import models


class Order(models.Model):
    sku = models.CharField(max_length=40)
    quantity = models.PositiveIntegerField()
    status = models.CharField(max_length=20, default="placed")
    confirmed_at = models.DateTimeField(null=True)


class Summary(models.Model):
    taken_at = models.DateTimeField()
    confirmed_orders = models.PositiveIntegerField()

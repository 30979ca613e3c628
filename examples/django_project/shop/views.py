"""Placing an order: the order and its confirmation job commit together, or not at all."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from .models import Order
from .tasks import confirm_order


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(
            sku=request.POST["sku"], quantity=int(request.POST["quantity"])
        )
        # Written on Django's connection, in this transaction: if anything below raises, neither
        # the order nor its job exists, and a worker never sees a job for a missing order.
        confirm_order.defer(order_id=order.id)
    return JsonResponse({"order": order.id}, status=201)

"""The signup endpoint: the subscriber and their welcome task commit together, or not at all."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Subscriber
from .tasks import send_welcome


def subscribe(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        subscriber = Subscriber.objects.create(email=request.POST["email"])
        # Written in this transaction: no on_commit needed. If anything below raises, neither
        # the subscriber nor the task exists.
        result = send_welcome.enqueue(subscriber.id)
        if request.POST.get("fail"):
            raise ValueError("signup refused after the enqueue")
    return JsonResponse({"subscriber": subscriber.id, "task": result.id}, status=201)

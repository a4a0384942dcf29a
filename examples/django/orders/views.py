import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from drainpipe.contrib.django import connection

from .jobs import Receipt, jobs
from .models import Order


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body)
    with transaction.atomic():
        order = Order.objects.create(email=data["email"])
        # the enqueue runs on the ORM's connection, inside this atomic block: it commits
        # with the order, or disappears with it
        jobs().bound_to(connection()).enqueue(
            "receipts", Receipt(order_id=order.id, email=order.email)
        )
        if data.get("fail"):
            raise RuntimeError("payment declined")  # rolls back the order and the job
    return JsonResponse({"order": order.id}, status=201)

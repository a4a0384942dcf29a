from django.urls import path
from orders.jobs import billing_inbox

from drainpipe.contrib.django import webhook_view
from orders import views

urlpatterns = [
    path("orders", views.create_order),
    path("hooks/billing", webhook_view(billing_inbox())),
]

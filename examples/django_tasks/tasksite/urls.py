"""URLs of the Django tasks example: a signup form's endpoint, and the admin (cronbase's jobs)."""

from django.contrib import admin
from django.urls import path
from newsletter import views

urlpatterns = [
    path("subscribe", views.subscribe),
    path("admin/", admin.site.urls),
]

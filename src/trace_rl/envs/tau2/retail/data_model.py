"""The retail DB (docs/tau2-fidelity.md §6): products with variants, users with payment methods, orders.

Field order follows upstream's models (it is the order tool results are printed in). Orders carry the seven optional
fields as nulls, and every price, amount and balance is a float.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from trace_rl.envs.tau2.db import Tau2DB, Tau2Record


class Variant(Tau2Record):
    item_id: str
    options: dict[str, str]
    available: bool
    price: float


class Product(Tau2Record):
    name: str
    product_id: str
    variants: dict[str, Variant]


class UserName(Tau2Record):
    first_name: str
    last_name: str


class UserAddress(Tau2Record):
    address1: str
    address2: str
    city: str
    country: str
    state: str
    zip: str


class CreditCard(Tau2Record):
    source: Literal["credit_card"]
    id: str
    brand: str
    last_four: str


class Paypal(Tau2Record):
    source: Literal["paypal"]
    id: str


class GiftCard(Tau2Record):
    source: Literal["gift_card"]
    id: str
    balance: float


PaymentMethod = Annotated[CreditCard | GiftCard | Paypal, Field(discriminator="source")]


class User(Tau2Record):
    user_id: str
    name: UserName
    address: UserAddress
    email: str
    payment_methods: dict[str, PaymentMethod]
    orders: list[str]


class OrderFulfillment(Tau2Record):
    tracking_id: list[str]
    item_ids: list[str]


class OrderItem(Tau2Record):
    name: str
    product_id: str
    item_id: str
    price: float
    options: dict[str, str]


class OrderPayment(Tau2Record):
    transaction_type: Literal["payment", "refund"]
    amount: float
    payment_method_id: str


OrderStatus = Literal[
    "processed",
    "pending",
    "pending (item modified)",
    "delivered",
    "cancelled",
    "exchange requested",
    "return requested",
]


class Order(Tau2Record):
    order_id: str
    user_id: str
    address: UserAddress
    items: list[OrderItem]
    status: OrderStatus
    fulfillments: list[OrderFulfillment]
    payment_history: list[OrderPayment]
    cancel_reason: Literal["no longer needed", "ordered by mistake"] | None = None
    exchange_items: list[str] | None = None
    exchange_new_items: list[str] | None = None
    exchange_payment_method_id: str | None = None
    exchange_price_difference: float | None = None
    return_items: list[str] | None = None
    return_payment_method_id: str | None = None


class RetailDB(Tau2DB):
    TABLES: ClassVar[tuple[str, ...]] = ("products", "users", "orders")

    products: dict[str, Product]
    users: dict[str, User]
    orders: dict[str, Order]

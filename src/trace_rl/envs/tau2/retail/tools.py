"""The retail toolkit: 16 tools at HEAD (`get_item_details` is hidden in v0.2 mode) with upstream's semantics
(docs/tau2-fidelity.md §6).

Every failure is a `ValueError` whose text the agent sees as `Error: <text>`. Writes go through the copy-on-write DB
(`db.writable`). Reward-relevant upstream quirks are kept by default and named in `trace_rl.envs.tau2.quirks`.
"""

from __future__ import annotations

import json
from typing import ClassVar

from trace_rl.envs.tau2.retail.data_model import (
    GiftCard,
    Order,
    OrderPayment,
    PaymentMethod,
    Product,
    RetailDB,
    User,
    UserAddress,
    Variant,
)
from trace_rl.envs.tau2.tools_base import Tau2Tools, calculate_expression
from trace_rl.envs.toolkit import ToolType, tool

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


class RetailTools(Tau2Tools):
    """Customer service for an online store."""

    DOMAIN: ClassVar[str] = "retail"
    db: RetailDB

    # -- lookups ------------------------------------------------------------------------------------------------
    def _order(self, order_id: str) -> Order:
        if order_id not in self.db.orders:
            raise ValueError("Order not found")
        return self.db.orders[order_id]

    def _user(self, user_id: str) -> User:
        if user_id not in self.db.users:
            raise ValueError("User not found")
        return self.db.users[user_id]

    def _product(self, product_id: str) -> Product:
        if product_id not in self.db.products:
            raise ValueError("Product not found")
        return self.db.products[product_id]

    def _variant(self, product_id: str, item_id: str) -> Variant:
        product = self._product(product_id)
        if item_id not in product.variants:
            raise ValueError("Variant not found")
        return product.variants[item_id]

    def _payment_method(self, user_id: str, payment_method_id: str) -> PaymentMethod:
        user = self._user(user_id)
        if payment_method_id not in user.payment_methods:
            raise ValueError("Payment method not found")
        return user.payment_methods[payment_method_id]

    def _credit_gift_card(self, user_id: str, payment_method_id: str, amount: float) -> None:
        """Add `amount` (may be negative) to a gift card's balance, rounded to cents."""
        card = self.db.writable("users", user_id).payment_methods[payment_method_id]
        card.balance += amount
        card.balance = round(card.balance, 2)

    @staticmethod
    def _check_counts(order: Order, item_ids: list[str], message: str) -> None:
        in_order = [item.item_id for item in order.items]
        for item_id in item_ids:
            if item_ids.count(item_id) > in_order.count(item_id):
                raise ValueError(message.format(item_id=item_id))

    # -- generic tools ------------------------------------------------------------------------------------------
    @tool(ToolType.GENERIC)
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression (numbers, + - * /, parentheses, spaces).

        Args:
            expression: The expression, such as '2 + 2'.
        """
        return calculate_expression(expression)

    @tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the conversation to a human agent with a summary of the user's issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    # -- reads --------------------------------------------------------------------------------------------------
    @tool(ToolType.READ)
    def find_user_id_by_email(self, email: str) -> str:
        """Find a user id by email address (case-insensitive).

        Args:
            email: The user's email, such as 'something@example.com'.
        """
        wanted = email.lower()
        for user_id, user in self.db.users.items():
            if user.email.lower() == wanted:
                return user_id
        raise ValueError("User not found")

    @tool(ToolType.READ)
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a user id by first and last name (case-insensitive) and zip code.

        Args:
            first_name: The user's first name, such as 'John'.
            last_name: The user's last name, such as 'Doe'.
            zip: The user's zip code, such as '12345'.
        """
        first, last = first_name.lower(), last_name.lower()
        for user_id, user in self.db.users.items():
            if (
                user.name.first_name.lower() == first
                and user.name.last_name.lower() == last
                and user.address.zip == zip
            ):
                return user_id
        raise ValueError("User not found")

    @tool(ToolType.READ)
    def get_order_details(self, order_id: str) -> Order:
        """Get an order's status and details.

        Args:
            order_id: The order id, such as '#W0000000' (with the leading '#').
        """
        return self._order(order_id)

    @tool(ToolType.READ)
    def get_product_details(self, product_id: str) -> Product:
        """Get a product's inventory: every variant with its options, availability and price.

        Args:
            product_id: The product id, such as '6086499569' (not an item id).
        """
        return self._product(product_id)

    @tool(ToolType.READ)
    def get_item_details(self, item_id: str) -> Variant:
        """Get one item (variant) by item id.

        Args:
            item_id: The item id, such as '6086499569' (not a product id).
        """
        for product in self.db.products.values():
            if item_id in product.variants:
                return product.variants[item_id]
        raise ValueError("Item not found")

    @tool(ToolType.READ)
    def get_user_details(self, user_id: str) -> User:
        """Get a user's profile, payment methods and orders.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._user(user_id)

    @tool(ToolType.READ)
    def list_all_product_types(self) -> str:
        """List every product type's name and product id (a JSON object sorted by name)."""
        return json.dumps({p.name: p.product_id for p in self.db.products.values()}, sort_keys=True)

    # -- writes -------------------------------------------------------------------------------------------------
    @tool(ToolType.WRITE)
    def cancel_pending_order(self, order_id: str, reason: str) -> Order:
        """Cancel a pending order and refund its payments (gift cards at once).

        Args:
            order_id: The order id, such as '#W0000000'.
            reason: 'no longer needed' or 'ordered by mistake'.
        """
        order = self._order(order_id)
        if order.status != "pending":
            raise ValueError("Non-pending order cannot be cancelled")
        if reason not in CANCEL_REASONS:
            raise ValueError("Invalid reason")
        order = self.db.writable("orders", order_id)
        refunds = []
        for payment in order.payment_history:  # every entry, whatever its type
            refunds.append(
                OrderPayment(
                    transaction_type="refund", amount=payment.amount, payment_method_id=payment.payment_method_id
                )
            )
            method = self._payment_method(order.user_id, payment.payment_method_id)
            if isinstance(method, GiftCard):
                self._credit_gift_card(order.user_id, payment.payment_method_id, payment.amount)
        order.status = "cancelled"
        order.cancel_reason = reason  # type: ignore[assignment]
        order.payment_history.extend(refunds)
        return order

    @tool(ToolType.WRITE)
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Request an exchange of delivered items for other variants of the same products.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to exchange (may repeat).
            new_item_ids: The new item ids, position by position, each of the same product.
            payment_method_id: The payment method that pays or receives the price difference.
        """
        order = self._order(order_id)
        if order.status != "delivered":
            raise ValueError("Non-delivered order cannot be exchanged")
        self._check_counts(order, item_ids, "Number of {item_id} not found.")
        if len(item_ids) != len(new_item_ids):
            raise ValueError("The number of items to be exchanged should match.")
        diff: float = 0  # an int 0 when there are no items, as upstream
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
            if item_id == new_item_id and not self.quirk("exchange_same_item"):
                raise ValueError("The new item id should be different from the old item id")
            item = next((it for it in order.items if it.item_id == item_id), None)
            if item is None:
                raise ValueError(f"Item {item_id} not found")
            variant = self._variant(item.product_id, new_item_id)
            if not variant.available:
                raise ValueError(f"New item {new_item_id} not found or available")
            diff += variant.price - item.price
        diff = round(diff, 2)
        method = self._payment_method(order.user_id, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff:
            raise ValueError("Insufficient gift card balance to pay for the price difference")
        order = self.db.writable("orders", order_id)
        order.status = "exchange requested"
        order.exchange_items = sorted(item_ids)
        order.exchange_new_items = sorted(new_item_ids)
        order.exchange_payment_method_id = payment_method_id
        order.exchange_price_difference = diff
        return order

    @tool(ToolType.WRITE)
    def modify_pending_order_address(
        self, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> Order:
        """Change the shipping address of a pending order.

        Args:
            order_id: The order id, such as '#W0000000'.
            address1: First address line, such as '123 Main St'.
            address2: Second address line, such as 'Apt 1' or ''.
            city: City, such as 'San Francisco'.
            state: State, such as 'CA'.
            country: Country, such as 'USA'.
            zip: Zip code, such as '12345'.
        """
        order = self._order(order_id)
        if "pending" not in order.status:
            raise ValueError("Non-pending order cannot be modified")
        address = UserAddress(address1=address1, address2=address2, city=city, state=state, country=country, zip=zip)
        order = self.db.writable("orders", order_id)
        order.address = address
        return order

    @tool(ToolType.WRITE)
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Swap items of a pending order for other variants of the same products (once per order).

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to modify (may repeat).
            new_item_ids: The new item ids, position by position, each of the same product.
            payment_method_id: The payment method that pays or receives the price difference.
        """
        order = self._order(order_id)
        if order.status != "pending":
            raise ValueError("Non-pending order cannot be modified")
        self._check_counts(order, item_ids, "{item_id} not found")
        if len(item_ids) != len(new_item_ids):
            raise ValueError("The number of items to be exchanged should match")
        diff: float = 0
        variants: list[Variant] = []
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
            if item_id == new_item_id:
                raise ValueError("The new item id should be different from the old item id")
            item = next((it for it in order.items if it.item_id == item_id), None)
            if item is None:
                raise ValueError(f"Item {item_id} not found")
            variant = self._variant(item.product_id, new_item_id)
            if not variant.available:
                raise ValueError(f"New item {new_item_id} not found or available")
            diff += variant.price - item.price
            variants.append(variant)
        if not self.quirk("modify_items_unrounded_diff"):
            diff = round(diff, 2)
        method = self._payment_method(order.user_id, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff:
            raise ValueError("Insufficient gift card balance to pay for the new item")
        order = self.db.writable("orders", order_id)
        if diff != 0 or self.quirk("modify_items_zero_refund"):
            kind = "payment" if diff > 0 else "refund"
            order.payment_history.append(
                OrderPayment(transaction_type=kind, amount=abs(diff), payment_method_id=payment_method_id)
            )
        if isinstance(method, GiftCard):
            self._credit_gift_card(order.user_id, payment_method_id, -diff)
        last_variant = self.quirk("modify_items_last_variant")
        for i, (item_id, new_item_id) in enumerate(zip(item_ids, new_item_ids, strict=False)):
            item = next((it for it in order.items if it.item_id == item_id), None)
            if item is None:
                raise ValueError(f"Item {item_id} not found")
            variant = variants[-1] if last_variant else variants[i]
            item.item_id = new_item_id
            item.price = variant.price
            item.options = dict(variant.options)
        order.status = "pending (item modified)"
        return order

    @tool(ToolType.WRITE)
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> Order:
        """Pay a pending order with another payment method (the old one is refunded).

        Args:
            order_id: The order id, such as '#W0000000'.
            payment_method_id: The new payment method, such as 'gift_card_0000000'.
        """
        order = self._order(order_id)
        if "pending" not in order.status:
            raise ValueError("Non-pending order cannot be modified")
        method = self._payment_method(order.user_id, payment_method_id)
        history = order.payment_history
        if len(history) != 1 or history[0].transaction_type != "payment":
            raise ValueError("There should be exactly one payment for a pending order")
        old_id = history[0].payment_method_id
        if old_id == payment_method_id:
            raise ValueError("The new payment method should be different from the current one")
        amount = history[0].amount
        if isinstance(method, GiftCard) and method.balance < amount:
            raise ValueError("Insufficient gift card balance to pay for the order")
        order = self.db.writable("orders", order_id)
        order.payment_history.extend(
            [
                OrderPayment(transaction_type="payment", amount=amount, payment_method_id=payment_method_id),
                OrderPayment(transaction_type="refund", amount=amount, payment_method_id=old_id),
            ]
        )
        if isinstance(method, GiftCard):
            self._credit_gift_card(order.user_id, payment_method_id, -amount)
        if isinstance(self._payment_method(order.user_id, old_id), GiftCard):
            self._credit_gift_card(order.user_id, old_id, amount)
        return order

    @tool(ToolType.WRITE)
    def modify_user_address(
        self, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> User:
        """Change a user's default address.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
            address1: First address line, such as '123 Main St'.
            address2: Second address line, such as 'Apt 1' or ''.
            city: City, such as 'San Francisco'.
            state: State, such as 'CA'.
            country: Country, such as 'USA'.
            zip: Zip code, such as '12345'.
        """
        self._user(user_id)
        address = UserAddress(address1=address1, address2=address2, city=city, state=state, country=country, zip=zip)
        user = self.db.writable("users", user_id)
        user.address = address
        return user

    @tool(ToolType.WRITE)
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> Order:
        """Request a return of delivered items; the refund goes to the original method or a gift card.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to return (may repeat).
            payment_method_id: The original payment method or a gift card of the user.
        """
        order = self._order(order_id)
        if order.status != "delivered":
            raise ValueError("Non-delivered order cannot be returned")
        user = self._user(order.user_id)
        method = self._payment_method(user.user_id, payment_method_id)
        if not isinstance(method, GiftCard) and payment_method_id != order.payment_history[0].payment_method_id:
            raise ValueError("Payment method should be the original payment method")
        self._check_counts(order, item_ids, "Some item not found")
        order = self.db.writable("orders", order_id)
        order.status = "return requested"
        order.return_items = sorted(item_ids)
        order.return_payment_method_id = payment_method_id
        return order

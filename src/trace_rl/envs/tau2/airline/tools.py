"""The airline toolkit: 14 tools with upstream's semantics (docs/tau2-fidelity.md §6; HEAD `a2c0247` = v0.2.0).

Lookups are exact (no case folding). Record-construction paths validate laxly through the typed models
(`250.0` -> 250, extra keys dropped); raw-assignment paths store values as passed. Fixed "now" and id sequences make
every tool deterministic. Reward-relevant upstream quirks are kept by default, see `trace_rl.envs.tau2.quirks`.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any, ClassVar

from pydantic import TypeAdapter

from trace_rl.envs.tau2.airline.data_model import (
    CABINS,
    AirportCode,
    Certificate,
    DirectFlight,
    Flight,
    FlightDateAvailable,
    FlightDB,
    FlightInfo,
    GiftCard,
    Passenger,
    Payment,
    Reservation,
    ReservationFlight,
    User,
)
from trace_rl.envs.tau2.tools_base import Tau2Tools, calculate_expression
from trace_rl.envs.toolkit import ToolType, tool

NOW = "2024-05-15T15:00:00"
RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
AIRPORTS = (
    ("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"), ("DFW", "Dallas"),
    ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"), ("BOS", "Boston"),
    ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"), ("EWR", "Newark"),
    ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"), ("PHL", "Philadelphia"), ("LGA", "LaGuardia"),
)  # fmt: skip  # table: packed (code, city) pairs
_INT = TypeAdapter(int)


def _records(items: Any, model: type[Any]) -> Any:
    """Lists of JSON objects become records (lax validation); anything else is left as passed, as upstream."""
    if all(isinstance(item, dict) for item in items):
        return [model(**item) for item in items]
    return items


class AirlineTools(Tau2Tools):
    """Reservations for a small airline."""

    DOMAIN: ClassVar[str] = "airline"
    db: FlightDB

    # -- lookups ------------------------------------------------------------------------------------------------
    def _user(self, user_id: str) -> User:
        if user_id not in self.db.users:
            raise ValueError(f"User {user_id} not found")
        return self.db.users[user_id]

    def _reservation(self, reservation_id: str) -> Reservation:
        if reservation_id not in self.db.reservations:
            raise ValueError(f"Reservation {reservation_id} not found")
        return self.db.reservations[reservation_id]

    def _flight(self, flight_number: str) -> Flight:
        if flight_number not in self.db.flights:
            raise ValueError(f"Flight {flight_number} not found")
        return self.db.flights[flight_number]

    def _instance(self, flight_number: str, date: str) -> Any:
        flight = self._flight(flight_number)
        if date not in flight.dates:
            raise ValueError(f"Flight {flight_number} not found on date {date}")
        return flight.dates[date]

    def _search(
        self, date: str, origin: str | None = None, destination: str | None = None, leave_after: str | None = None
    ) -> list[DirectFlight]:
        found = []
        for flight in self.db.flights.values():
            instance = flight.dates.get(date)
            if (
                (origin is None or flight.origin == origin)
                and (destination is None or flight.destination == destination)
                and isinstance(instance, FlightDateAvailable)
                and (leave_after is None or flight.scheduled_departure_time_est >= leave_after)
            ):
                found.append(
                    DirectFlight(
                        flight_number=flight.flight_number,
                        origin=flight.origin,
                        destination=flight.destination,
                        status="available",
                        scheduled_departure_time_est=flight.scheduled_departure_time_est,
                        scheduled_arrival_time_est=flight.scheduled_arrival_time_est,
                        available_seats=instance.available_seats,
                        prices=instance.prices,
                    )
                )
        return found

    def _pay(self, user: User, payment_id: str, price: Any) -> Payment | None:
        """The update tools' payment step (docs/tau2-fidelity.md §6): checks, gift-card deduction, then the payment
        record."""
        if payment_id not in user.payment_methods:
            raise ValueError("Payment method not found")
        method = user.payment_methods[payment_id]
        if method.source == "certificate":
            raise ValueError("Certificate cannot be used to update reservation")
        if isinstance(method, GiftCard) and method.amount < price:
            raise ValueError("Gift card balance is not enough")
        if isinstance(method, GiftCard):
            self.db.writable("users", user.user_id).payment_methods[payment_id].amount -= price
        return Payment(payment_id=payment_id, amount=price) if price != 0 else None

    def _move_seats(self, flight_number: str, date: str, cabin: str, delta: int) -> None:
        """Add `delta` seats of `cabin` on an available flight date (used only with seat quirks turned off)."""
        flight = self.db.flights.get(flight_number)
        if flight is None or not isinstance(flight.dates.get(date), FlightDateAvailable):
            return
        if cabin not in flight.dates[date].available_seats:
            return
        self.db.writable("flights", flight_number).dates[date].available_seats[cabin] += delta

    # -- writes -------------------------------------------------------------------------------------------------
    @tool(ToolType.WRITE)
    def book_reservation(
        self,
        user_id: str,
        origin: str,
        destination: str,
        flight_type: str,
        cabin: str,
        flights: list[dict[str, Any]],
        passengers: list[dict[str, Any]],
        payment_methods: list[dict[str, Any]],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: str,
    ) -> Reservation:
        """Book a reservation.

        Args:
            user_id: The user booking, such as 'sara_doe_496'.
            origin: IATA code of the origin city, such as 'SFO'.
            destination: IATA code of the destination city, such as 'JFK'.
            flight_type: 'one_way' or 'round_trip'.
            cabin: 'basic_economy', 'economy' or 'business'.
            flights: Objects {flight_number, date} for each flight segment.
            passengers: Objects {first_name, last_name, dob} for each passenger.
            payment_methods: Objects {payment_id, amount} for each payment.
            total_baggages: Total number of bags.
            nonfree_baggages: Number of paid bags.
            insurance: 'yes' or 'no'.
        """
        flights = _records(flights, FlightInfo)
        passengers = _records(passengers, Passenger)
        payments = _records(payment_methods, Payment)
        user = self._user(user_id)
        reservation_id = next((r for r in RESERVATION_IDS if r not in self.db.reservations), None)
        if reservation_id is None:
            raise ValueError("Too many reservations")
        reservation = Reservation(
            reservation_id=reservation_id,
            user_id=user_id,
            origin=origin,
            destination=destination,
            flight_type=flight_type,  # type: ignore[arg-type]
            cabin=cabin,  # type: ignore[arg-type]
            flights=[],
            passengers=copy.deepcopy(passengers),
            payment_history=copy.deepcopy(payments),
            created_at=NOW,
            total_baggages=total_baggages,
            nonfree_baggages=nonfree_baggages,
            insurance=insurance,  # type: ignore[arg-type]
        )
        n = len(passengers)
        total: Any = 0
        booked: list[tuple[str, str]] = []
        for info in flights:
            flight = self._flight(info.flight_number)
            instance = self._instance(info.flight_number, info.date)
            if not isinstance(instance, FlightDateAvailable):
                raise ValueError(f"Flight {info.flight_number} not available on date {info.date}")
            if instance.available_seats[cabin] < n:  # type: ignore[index]
                raise ValueError(f"Not enough seats on flight {info.flight_number}")
            price = instance.prices[cabin]  # type: ignore[index]
            reservation.flights.append(
                ReservationFlight(
                    flight_number=info.flight_number,
                    origin=flight.origin,
                    destination=flight.destination,
                    date=info.date,
                    price=price,
                )
            )
            booked.append((info.flight_number, info.date))
            total += price * n
        if insurance == "yes":
            total += 30 * n
        total += 50 * nonfree_baggages  # the raw argument
        if not self.quirk("book_duplicate_payments"):
            ids = [p.payment_id for p in payments]
            duplicate = next((pid for pid in ids if ids.count(pid) > 1), None)
            if duplicate is not None:
                raise ValueError(f"Payment method {duplicate} listed more than once")
        for payment in payments:
            if payment.payment_id not in user.payment_methods:
                raise ValueError(f"Payment method {payment.payment_id} not found")
            method = user.payment_methods[payment.payment_id]
            if method.source in ("gift_card", "certificate") and method.amount < payment.amount:  # type: ignore[union-attr]
                raise ValueError(f"Not enough balance in payment method {payment.payment_id}")
        paid = sum(p.amount for p in payments)
        if paid != total:
            raise ValueError(f"Payment amount does not add up, total price is {total}, but paid {paid}")
        for payment in payments:  # a certificate listed twice fails here with KeyError, after earlier charges
            owner = self.db.writable("users", user_id)
            method = owner.payment_methods[payment.payment_id]
            if method.source == "gift_card":
                method.amount -= payment.amount  # type: ignore[union-attr]
            elif method.source == "certificate":
                owner.payment_methods.pop(payment.payment_id)
        for flight_number, date in booked:
            self.db.writable("flights", flight_number).dates[date].available_seats[cabin] -= n
        self.db.insert("reservations", reservation_id, reservation)
        self.db.writable("users", user_id).reservations.append(reservation_id)
        return reservation

    @tool(ToolType.WRITE)
    def cancel_reservation(self, reservation_id: str) -> Reservation:
        """Cancel a whole reservation: every payment is reversed in the history.

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
        """
        reservation = self._reservation(reservation_id)
        if reservation.status == "cancelled" and not self.quirk("cancel_repeatable"):
            raise ValueError(f"Reservation {reservation_id} is already cancelled")
        reservation = self.db.writable("reservations", reservation_id)
        refunds = [Payment(payment_id=p.payment_id, amount=-p.amount) for p in reservation.payment_history]
        reservation.payment_history.extend(refunds)
        reservation.status = "cancelled"
        if not self.quirk("cancel_keeps_seats"):
            n = len(reservation.passengers)
            for segment in reservation.flights:
                self._move_seats(segment.flight_number, segment.date, reservation.cabin, n)
        return reservation

    @tool(ToolType.WRITE)
    def send_certificate(self, user_id: str, amount: int) -> str:
        """Send a travel certificate to a user.

        Args:
            user_id: The user, such as 'sara_doe_496'.
            amount: The certificate's amount.
        """
        user = self._user(user_id)
        for payment_id in CERTIFICATE_IDS:
            if payment_id not in user.payment_methods:
                certificate = Certificate(id=payment_id, amount=amount, source="certificate")
                self.db.writable("users", user_id).payment_methods[payment_id] = certificate
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        raise ValueError("Too many certificates")

    @tool(ToolType.WRITE)
    def update_reservation_baggages(
        self, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> Reservation:
        """Change a reservation's bag counts; added paid bags are charged 50 each.

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
            total_baggages: The new total number of bags.
            nonfree_baggages: The new number of paid bags.
            payment_id: A payment method of the user, such as 'credit_card_7815826'.
        """
        reservation = self._reservation(reservation_id)
        user = self._user(reservation.user_id)
        if not self.quirk("raw_baggage_values"):
            total_baggages, nonfree_baggages = (
                _INT.validate_python(total_baggages),
                _INT.validate_python(nonfree_baggages),
            )
        price = 50 * max(0, nonfree_baggages - reservation.nonfree_baggages)
        payment = self._pay(user, payment_id, price)
        reservation = self.db.writable("reservations", reservation_id)
        if payment is not None:
            reservation.payment_history.append(payment)
        reservation.total_baggages = total_baggages
        reservation.nonfree_baggages = nonfree_baggages
        return reservation

    @tool(ToolType.WRITE)
    def update_reservation_flights(
        self, reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str
    ) -> Reservation:
        """Replace a reservation's itinerary (the ENTIRE new list of segments) and cabin, paying the difference.

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
            cabin: The cabin class of the whole reservation.
            flights: Objects {flight_number, date} for every segment of the new itinerary, unchanged ones included.
            payment_id: A payment method of the user, such as 'credit_card_7815826'.
        """
        if not self.quirk("raw_cabin_value") and cabin not in CABINS:
            raise ValueError(f"Invalid cabin: {cabin}")
        flights = _records(flights, FlightInfo)
        reservation = self._reservation(reservation_id)
        user = self._user(reservation.user_id)
        n = len(reservation.passengers)
        total: Any = 0
        segments: list[ReservationFlight] = []
        taken: list[tuple[str, str]] = []
        for info in flights:
            flight = self._flight(info.flight_number)
            kept = next(
                (
                    s
                    for s in reservation.flights
                    if s.flight_number == info.flight_number and s.date == info.date and cabin == reservation.cabin
                ),
                None,
            )
            if kept is not None:  # kept at its old price, without availability check
                total += kept.price * n
                segments.append(kept.model_copy())
                continue
            instance = self._instance(info.flight_number, info.date)
            if not isinstance(instance, FlightDateAvailable):
                raise ValueError(f"Flight {info.flight_number} not available on date {info.date}")
            if instance.available_seats[cabin] < n:  # type: ignore[index]  # KeyError for an unknown cabin
                raise ValueError(f"Not enough seats on flight {info.flight_number}")
            segment = ReservationFlight(
                flight_number=info.flight_number,
                date=info.date,
                price=instance.prices[cabin],  # type: ignore[index]
                origin=flight.origin,
                destination=flight.destination,
            )
            total += segment.price * n
            segments.append(segment)
            taken.append((info.flight_number, info.date))
        total -= sum(s.price for s in reservation.flights) * n
        payment = self._pay(user, payment_id, total)
        reservation = self.db.writable("reservations", reservation_id)
        if payment is not None:
            reservation.payment_history.append(payment)
        if not self.quirk("update_flights_keeps_seats"):
            kept_keys = {(s.flight_number, s.date) for s in segments} if cabin == reservation.cabin else set()
            for old in reservation.flights:
                if (old.flight_number, old.date) not in kept_keys:
                    self._move_seats(old.flight_number, old.date, reservation.cabin, n)
            for flight_number, date in taken:
                self._move_seats(flight_number, date, cabin, -n)
        reservation.flights = segments
        reservation.cabin = cabin  # type: ignore[assignment]  # stored as passed (quirk raw_cabin_value)
        return reservation

    @tool(ToolType.WRITE)
    def update_reservation_passengers(self, reservation_id: str, passengers: list[dict[str, Any]]) -> Reservation:
        """Replace the passengers of a reservation (same number of passengers).

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
            passengers: Objects {first_name, last_name, dob} for each passenger.
        """
        passengers = _records(passengers, Passenger)
        reservation = self._reservation(reservation_id)
        if len(passengers) != len(reservation.passengers):
            raise ValueError("Number of passengers does not match")
        reservation = self.db.writable("reservations", reservation_id)
        reservation.passengers = copy.deepcopy(passengers)
        return reservation

    # -- reads --------------------------------------------------------------------------------------------------
    @tool(ToolType.READ)
    def get_reservation_details(self, reservation_id: str) -> Reservation:
        """Get the details of a reservation.

        Args:
            reservation_id: The reservation id, such as '8JX2WO'.
        """
        return self._reservation(reservation_id)

    @tool(ToolType.READ)
    def get_user_details(self, user_id: str) -> User:
        """Get a user's profile, payment methods and reservations.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._user(user_id)

    @tool(ToolType.READ)
    def list_all_airports(self) -> list[AirportCode]:
        """List every airport served, with its city."""
        return [AirportCode(iata=iata, city=city) for iata, city in AIRPORTS]

    @tool(ToolType.READ)
    def search_direct_flight(self, origin: str, destination: str, date: str) -> list[DirectFlight]:
        """Find available direct flights between two airports on a date.

        Args:
            origin: Origin airport, such as 'JFK'.
            destination: Destination airport, such as 'LAX'.
            date: The date, 'YYYY-MM-DD'.
        """
        return self._search(date=date, origin=origin, destination=destination)

    @tool(ToolType.READ)
    def search_onestop_flight(self, origin: str, destination: str, date: str) -> list[list[DirectFlight]]:
        """Find available one-stop connections between two airports leaving on a date.

        Args:
            origin: Origin airport, such as 'JFK'.
            destination: Destination airport, such as 'LAX'.
            date: The date of the first leg, 'YYYY-MM-DD'.
        """
        pairs = []
        for first in self._search(date=date, origin=origin):
            first.date = date
            second_date = date
            if "+1" in first.scheduled_arrival_time_est:
                if self.quirk("onestop_date_arithmetic"):
                    second_date = f"2024-05-{int(date[-2:]) + 1}"
                else:
                    second_date = (dt.date.fromisoformat(date) + dt.timedelta(days=1)).isoformat()
            for second in self._search(
                date=second_date,
                origin=first.destination,
                destination=destination,
                leave_after=first.scheduled_arrival_time_est,
            ):
                second.date = second_date
                pairs.append([first, second])
        return pairs

    @tool(ToolType.READ)
    def get_flight_status(self, flight_number: str, date: str) -> str:
        """Get the status of a flight on a date.

        Args:
            flight_number: The flight number, such as 'HAT001'.
            date: The date, 'YYYY-MM-DD'.
        """
        return self._instance(flight_number, date).status

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

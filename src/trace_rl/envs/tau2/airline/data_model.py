"""The airline DB (docs/tau2-fidelity.md §5–6): flights with per-date instances, users, reservations.

Canonical form: `address.address2` and `reservation.status` always present (null by default); gift-card and
certificate amounts are floats; seats, prices, payments and bag counts are ints. Field order follows upstream's models
(tool results print in that order). Helper records (`FlightInfo`, `DirectFlight`, `AirportCode`) are tool I/O only.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from trace_rl.envs.tau2.db import Tau2DB, Tau2Record

CabinClass = Literal["business", "economy", "basic_economy"]
FlightType = Literal["round_trip", "one_way"]
Insurance = Literal["yes", "no"]
CABINS: tuple[str, ...] = ("business", "economy", "basic_economy")


class Name(Tau2Record):
    first_name: str
    last_name: str


class Address(Tau2Record):
    address1: str
    address2: str | None = None
    city: str
    country: str
    state: str
    zip: str


class Payment(Tau2Record):
    payment_id: str
    amount: int


class CreditCard(Tau2Record):
    source: Literal["credit_card"]
    id: str
    brand: str
    last_four: str


class GiftCard(Tau2Record):
    source: Literal["gift_card"]
    id: str
    amount: float


class Certificate(Tau2Record):
    source: Literal["certificate"]
    id: str
    amount: float


PaymentMethod = Annotated[CreditCard | GiftCard | Certificate, Field(discriminator="source")]


class Passenger(Tau2Record):
    first_name: str
    last_name: str
    dob: str


class FlightDateAvailable(Tau2Record):
    status: Literal["available"]
    available_seats: dict[CabinClass, int]
    prices: dict[CabinClass, int]


class FlightDateLanded(Tau2Record):
    status: Literal["landed"]
    actual_departure_time_est: str
    actual_arrival_time_est: str


class FlightDateCancelled(Tau2Record):
    status: Literal["cancelled"]


class FlightDateDelayed(Tau2Record):
    status: Literal["delayed"]
    estimated_departure_time_est: str
    estimated_arrival_time_est: str


class FlightDateFlying(Tau2Record):
    status: Literal["flying"]
    actual_departure_time_est: str
    estimated_arrival_time_est: str


class FlightDateOnTime(Tau2Record):
    status: Literal["on time"]
    estimated_departure_time_est: str
    estimated_arrival_time_est: str


FlightDate = Annotated[
    FlightDateAvailable
    | FlightDateLanded
    | FlightDateCancelled
    | FlightDateDelayed
    | FlightDateFlying
    | FlightDateOnTime,
    Field(discriminator="status"),
]


class Flight(Tau2Record):
    flight_number: str
    origin: str
    destination: str
    scheduled_departure_time_est: str
    scheduled_arrival_time_est: str
    dates: dict[str, FlightDate]


class DirectFlight(Tau2Record):
    flight_number: str
    origin: str
    destination: str
    status: Literal["available"]
    scheduled_departure_time_est: str
    scheduled_arrival_time_est: str
    date: str | None = None
    available_seats: dict[CabinClass, int]
    prices: dict[CabinClass, int]


class ReservationFlight(Tau2Record):
    flight_number: str
    origin: str
    destination: str
    date: str
    price: int


class FlightInfo(Tau2Record):
    flight_number: str
    date: str


class AirportCode(Tau2Record):
    iata: str
    city: str


class User(Tau2Record):
    user_id: str
    name: Name
    address: Address
    email: str
    dob: str
    payment_methods: dict[str, PaymentMethod]
    saved_passengers: list[Passenger]
    membership: Literal["gold", "silver", "regular"]
    reservations: list[str]


class Reservation(Tau2Record):
    reservation_id: str
    user_id: str
    origin: str
    destination: str
    flight_type: FlightType
    cabin: CabinClass
    flights: list[ReservationFlight]
    passengers: list[Passenger]
    payment_history: list[Payment]
    created_at: str
    total_baggages: int
    nonfree_baggages: int
    insurance: Insurance
    status: Literal["cancelled"] | None = None


class FlightDB(Tau2DB):
    TABLES: ClassVar[tuple[str, ...]] = ("flights", "users", "reservations")

    flights: dict[str, Flight]
    users: dict[str, User]
    reservations: dict[str, Reservation]

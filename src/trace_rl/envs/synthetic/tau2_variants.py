"""τ² variants (`tau2_variants`): train tasks re-targeted at other users and orders, gold actions re-derived.

Covered shapes: τ² **retail** tasks whose gold actions are all the agent's, all succeed on replay, include at least
one write, and use only: the lookups (`find_user_id_by_email`, `find_user_id_by_name_zip`, `get_user_details`,
`get_order_details`, `get_product_details`, `get_item_details`, `list_all_product_types`), `calculate` (dropped:
it changes nothing) and the writes `cancel_pending_order`, `modify_pending_order_address`, `modify_user_address`,
`modify_pending_order_payment`, `modify_pending_order_items`, `exchange_delivered_order_items`,
`return_delivered_order_items`, in any combination (59 of the 74 retail train tasks of the HEAD task set). Not
covered: airline, tasks whose gold is read-only or empty (refusals: whether a refusal is still right for another
user is a policy judgment that replay cannot verify), transfers, and tasks with deliberately failing gold lookups.

A variant: a different user (never the source's, never one the test split refers to — checked through the
environment's hashed leak index) whose orders match the source orders' statuses; per order, the same number of
items, each exchanged/modified item getting another available variant of its product; payment methods by role
(the order's original method, a gift card, or another method of the same kind); new addresses taken from other
users; a random cancel reason. The gold actions are rewritten by a per-tool, per-argument mapping and kept only if
they replay without error and change exactly the mapped records. The user's instructions are rewritten from
templates (no source text is reused); difficulty ≥ 2 describes orders by their items instead of their ids, ≥ 3 makes
the user identify by name and zip instead of email.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trace_rl.artifacts.environments import EnvSpec
from trace_rl.envs.synthetic.generators import finish
from trace_rl.envs.synthetic.leak_guard import LeakIndex, fingerprint
from trace_rl.errors import UserError
from trace_rl.types import Action, EvaluationCriteria, RewardType, Task, ToolCall

if TYPE_CHECKING:
    from trace_rl.envs.base import Domain, ToolkitEnvironment

LOOKUPS = {
    "find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details", "get_order_details",
    "get_product_details", "get_item_details", "list_all_product_types",
}  # fmt: skip  # word list: packed, not one per line
DROPPED = {"calculate"}
WRITES = {
    "cancel_pending_order", "modify_pending_order_address", "modify_user_address", "modify_pending_order_payment",
    "modify_pending_order_items", "exchange_delivered_order_items", "return_delivered_order_items",
}  # fmt: skip  # word list: packed, not one per line
ITEM_SWAPS = {"modify_pending_order_items", "exchange_delivered_order_items"}
ADDRESS_KEYS = ("address1", "address2", "city", "state", "country", "zip")
REASONS = ("no longer needed", "ordered by mistake")


def supported_shape(task: Task, env: ToolkitEnvironment) -> bool:
    """Whether `task` is a retail task this generator can vary (see the module docstring)."""
    actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    names = {a.name for a in actions}
    if not actions or not names & WRITES or not names <= LOOKUPS | DROPPED | WRITES:
        return False
    if any(a.requestor != "assistant" for a in actions) or "find_user_id_by_email" not in env.tools.tool_names:
        return False
    live = env.fresh()
    live.reset(task)
    for i, a in enumerate(actions):
        if live.execute(ToolCall(id=f"s{i}", name=a.name, arguments=a.arguments)).error:
            return False
    return True


@dataclass
class Mapping:
    """Old → new entities of one variant."""

    user: str = ""
    orders: dict[str, str] = field(default_factory=dict)
    items: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (old order, old item) -> new items queue
    new_items: dict[str, str] = field(default_factory=dict)  # old new-item id -> new new-item id (by position)
    payments: dict[str, str] = field(default_factory=dict)
    products: dict[str, str] = field(default_factory=dict)
    item_ids: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, dict[str, str]] = field(default_factory=dict)  # write index -> new address
    reasons: dict[int, str] = field(default_factory=dict)


class Tau2Variants:
    """params: `sources` (train task ids of covered shapes), `tries` per seed."""

    def __init__(self, spec: EnvSpec, target: Domain, leak: LeakIndex | None) -> None:
        self.spec = spec
        self.target = target
        self.leak = leak
        by_id = {t.id: t for t in target.tasks("train")}
        self.sources = [by_id[i] for i in spec.generator.params.get("sources", []) if i in by_id]
        if not self.sources:
            raise UserError(f"capability env '{spec.name}': no τ² source task of a covered shape")
        self.tries = int(spec.generator.params.get("tries", 12))
        self.env = target.make_env()
        db = self.env.tools.db
        self.users: dict[str, Any] = db.users  # type: ignore[attr-defined]
        self.orders: dict[str, Any] = db.orders  # type: ignore[attr-defined]
        self.products: dict[str, Any] = db.products  # type: ignore[attr-defined]
        self.user_ids = sorted(uid for uid in self.users if not self._excluded(uid))

    def _excluded(self, user_id: str) -> bool:
        if self.leak is None:
            return False
        user = self.users[user_id]
        name = f"{user.name.first_name} {user.name.last_name}".lower()
        prints = self.leak.prints
        return (
            fingerprint("id", user_id.lower()) in prints["id"]
            or fingerprint("id", user.email.lower()) in prints["id"]
            or fingerprint("name", name) in prints["name"]
            or any(fingerprint("id", o.lower()) in prints["id"] for o in user.orders)
        )

    # -- one variant -------------------------------------------------------------------------------------------------
    def make(self, seed: int, salt: int = 0) -> Task:
        base = self.spec.generator.seed_base
        for attempt in range(self.tries):
            rng = random.Random(f"trace-rl/tau2-variant/{self.spec.name}/{base + seed}/{salt}/{attempt}")
            source = rng.choice(self.sources)
            task = self.vary(source, rng)
            if task is not None:
                return finish(task, self.spec, seed, {"source_task_id": source.id, "variant_attempt": attempt})
        raise UserError(f"capability env '{self.spec.name}': no valid τ² variant for seed {seed} in {self.tries} tries")

    def vary(self, source: Task, rng: random.Random) -> Task | None:
        actions = [a for a in source.evaluation_criteria.actions or [] if a.name not in DROPPED]  # type: ignore[union-attr]
        source_user = self._source_user(actions)
        if source_user is None:
            return None
        candidates = [u for u in self.user_ids if u != source_user]
        rng.shuffle(candidates)
        for user_id in candidates[:40]:
            mapping = self._map(actions, user_id, rng)
            if mapping is None:
                continue
            new_actions = [self._rewrite(i, a, mapping) for i, a in enumerate(actions)]
            if self.spec.generator.difficulty >= 2 and not any(a.name == "get_user_details" for a in new_actions):
                # orders are described, not named: the gold path reads the user's order list first
                at = next((k + 1 for k, a in enumerate(new_actions) if a.name.startswith("find_user_id")), 0)
                details = Action(action_id="v_user", name="get_user_details", arguments={"user_id": user_id})
                new_actions.insert(at, details)
            if not self._replays(source, actions, new_actions, mapping):
                continue
            return self._task(source, new_actions, mapping, rng)
        return None

    def _source_user(self, actions: list[Action]) -> str | None:
        for a in actions:
            if a.arguments.get("user_id") in self.users:
                return str(a.arguments["user_id"])
            if a.arguments.get("order_id") in self.orders:
                return str(self.orders[a.arguments["order_id"]].user_id)
            if a.name == "find_user_id_by_email":
                hit = [u for u, r in self.users.items() if r.email.lower() == str(a.arguments.get("email")).lower()]
                if hit:
                    return hit[0]
        return None

    def _map(self, actions: list[Action], user_id: str, rng: random.Random) -> Mapping | None:
        m = Mapping(user=user_id)
        user = self.users[user_id]
        free = [o for o in user.orders if o in self.orders]
        rng.shuffle(free)
        needs: dict[str, list[Action]] = {}
        for a in actions:
            oid = a.arguments.get("order_id")
            if isinstance(oid, str) and oid in self.orders:
                needs.setdefault(oid, []).append(a)
        for old_oid, acts in needs.items():
            old = self.orders[old_oid]
            choice = None
            for new_oid in free:
                if new_oid in m.orders.values() or self.orders[new_oid].status != old.status:
                    continue
                if self._map_items(old_oid, new_oid, acts, m, rng):
                    choice = new_oid
                    break
            if choice is None:
                return None
            m.orders[old_oid] = choice
        for i, a in enumerate(actions):
            if "payment_method_id" in a.arguments:
                new_pm = self._map_payment(a, m, user, rng)
                if new_pm is None:
                    return None
                m.payments[f"{i}"] = new_pm
            if a.name in ("modify_pending_order_address", "modify_user_address"):
                others = [u for u in self.user_ids if u != user_id]
                donor = self.users[rng.choice(others)].address
                m.addresses[f"{i}"] = {k: getattr(donor, k) for k in ADDRESS_KEYS}
            if a.name == "cancel_pending_order":
                m.reasons[i] = rng.choice(REASONS)
        return m

    def _map_items(self, old_oid: str, new_oid: str, acts: list[Action], m: Mapping, rng: random.Random) -> bool:
        """Map every item the actions name in the old order to distinct items of the new order."""
        old_items = [it.item_id for it in self.orders[old_oid].items]
        new_order = self.orders[new_oid]
        wanted: list[str] = []
        swaps: dict[str, str] = {}
        for a in acts:
            for k, old_item in enumerate(a.arguments.get("item_ids") or []):
                if old_item not in wanted:
                    wanted.append(old_item)
                if a.name in ITEM_SWAPS:
                    swaps[old_item] = (a.arguments.get("new_item_ids") or [])[k]
        if any(w not in old_items for w in wanted):
            return False
        pool = list(range(len(new_order.items)))
        rng.shuffle(pool)
        chosen: dict[str, str] = {}
        for old_item in wanted:
            picked = None
            for idx in pool:
                item = new_order.items[idx]
                if item.item_id in chosen.values():
                    continue
                if old_item in swaps:
                    alts = [
                        v.item_id
                        for v in self.products[item.product_id].variants.values()
                        if v.available and v.item_id != item.item_id
                    ]
                    if not alts:
                        continue
                    m.new_items[f"{old_oid}/{swaps[old_item]}"] = rng.choice(sorted(alts))
                picked = item.item_id
                m.products[self.orders[old_oid].items[old_items.index(old_item)].product_id] = item.product_id
                break
            if picked is None:
                return False
            chosen[old_item] = picked
            pool = [i for i in pool if new_order.items[i].item_id != picked]
        for old_item, new_item in chosen.items():
            m.item_ids[f"{old_oid}/{old_item}"] = new_item
        return True

    def _map_payment(self, a: Action, m: Mapping, user: Any, rng: random.Random) -> str | None:
        old_pm = str(a.arguments["payment_method_id"])
        old_oid = a.arguments.get("order_id")
        new_oid = m.orders.get(old_oid) if isinstance(old_oid, str) else None
        methods = user.payment_methods
        kind = old_pm.split("_")[0]
        if isinstance(old_oid, str) and old_oid in self.orders and new_oid:
            old_original = self.orders[old_oid].payment_history[0].payment_method_id
            new_original = self.orders[new_oid].payment_history[0].payment_method_id
            if old_pm == old_original:
                return str(new_original) if new_original in methods else None
            same_kind = sorted(p for p in methods if p.startswith(kind) and p != new_original)
        else:
            same_kind = sorted(p for p in methods if p.startswith(kind))
        return rng.choice(same_kind) if same_kind else None

    def _rewrite(self, i: int, a: Action, m: Mapping) -> Action:
        user = self.users[m.user]
        args = dict(a.arguments)
        oid = args.get("order_id")
        name = a.name
        if name == "find_user_id_by_email" and self.spec.generator.difficulty >= 3:
            name = "find_user_id_by_name_zip"  # the user identifies by name and zip only
        if name == "find_user_id_by_name_zip":
            args = {"first_name": user.name.first_name, "last_name": user.name.last_name, "zip": user.address.zip}
        elif name == "find_user_id_by_email":
            args = {"email": user.email}
        if "user_id" in args:
            args["user_id"] = m.user
        if isinstance(oid, str) and oid in m.orders:
            args["order_id"] = m.orders[oid]
        if "item_ids" in args and isinstance(oid, str):
            args["item_ids"] = [m.item_ids.get(f"{oid}/{x}", x) for x in args["item_ids"]]
        if "new_item_ids" in args and isinstance(oid, str):
            args["new_item_ids"] = [m.new_items.get(f"{oid}/{x}", x) for x in args["new_item_ids"]]
        if a.name == "get_product_details":
            args["product_id"] = m.products.get(args["product_id"], args["product_id"])
        if a.name == "get_item_details":
            args["item_id"] = next(
                (v for k, v in m.item_ids.items() if k.endswith(f"/{args['item_id']}")), args["item_id"]
            )
        if f"{i}" in m.payments:
            args["payment_method_id"] = m.payments[f"{i}"]
        if f"{i}" in m.addresses:
            args.update(m.addresses[f"{i}"])
        if i in m.reasons:
            args["reason"] = m.reasons[i]
        return Action(action_id=f"v{i}", name=name, arguments=args)

    def _changed(self, task: Task, actions: list[Action]) -> set[tuple[str, str]] | None:
        env = self.env.fresh()
        env.reset(task)
        before = env.tools.db
        pristine = {t: dict(before.table(t)) for t in before.tables()}  # type: ignore[attr-defined]
        for i, a in enumerate(actions):
            if env.execute(ToolCall(id=f"c{i}", name=a.name, arguments=a.arguments)).error:
                return None
        db = env.tools.db
        changed = set()
        for t in db.tables():  # type: ignore[attr-defined]
            for key, record in db.table(t).items():  # type: ignore[attr-defined]
                old = pristine[t].get(key)
                if old is not record and (old is None or old.model_dump() != record.model_dump()):
                    changed.add((t, key))
        return changed

    def _replays(self, source: Task, old: list[Action], new: list[Action], m: Mapping) -> bool:
        probe = Task(id="probe", evaluation_criteria=EvaluationCriteria(actions=new))
        got = self._changed(probe, new)
        want = self._changed(source, old)
        if got is None or want is None or not got:
            return False
        source_user = self._source_user(old)
        mapped = {(t, m.orders.get(k, m.user if k == source_user else k)) for t, k in want}
        return got == mapped

    # -- the user's side ---------------------------------------------------------------------------------------------
    def _describe_pm(self, pm_id: str) -> str:
        pm = self.users_pm(pm_id)
        if pm is None:
            return pm_id
        if pm.source == "credit_card":
            return f"{pm.brand} credit card ending in {pm.last_four}"
        return "PayPal account" if pm.source == "paypal" else "gift card"

    def users_pm(self, pm_id: str) -> Any:
        for user in self.users.values():
            if pm_id in user.payment_methods:
                return user.payment_methods[pm_id]
        return None

    def _order_ref(self, oid: str, knob: int) -> str:
        if knob < 2:
            return f"order {oid}"
        names = sorted({it.name.lower() for it in self.orders[oid].items})
        return f"{{my}} {self.orders[oid].status} order with the {', '.join(names)}"

    def _item_text(self, oid: str, item_id: str) -> str:
        item = next(it for it in self.orders[oid].items if it.item_id == item_id)
        opts = ", ".join(f"{k} {v}" for k, v in item.options.items())
        return f"the {item.name.lower()} ({opts})"

    def _variant_text(self, product_id: str, item_id: str) -> str:
        v = self.products[product_id].variants[item_id]
        return ", ".join(f"{k} {val}" for k, val in v.options.items())

    def _request(self, a: Action, knob: int) -> str:
        args = a.arguments
        oid = str(args.get("order_id", ""))
        ref = self._order_ref(oid, knob) if oid in self.orders else ""
        if a.name == "cancel_pending_order":
            return f"cancel {ref} because it is {args['reason']}"
        if a.name == "modify_pending_order_address":
            return f"change the shipping address of {ref} to {_address(args)}"
        if a.name == "modify_user_address":
            return f"update {{my}} default address to {_address(args)}"
        if a.name == "modify_pending_order_payment":
            return f"pay for {ref} with {{my}} {self._describe_pm(args['payment_method_id'])} instead"
        if a.name in ITEM_SWAPS:
            verb = "exchange" if a.name.startswith("exchange") else "change"
            pairs = []
            for old, new in zip(args["item_ids"], args["new_item_ids"], strict=False):
                product = next(it.product_id for it in self.orders[oid].items if it.item_id == old)
                pairs.append(f"{self._item_text(oid, old)} for the one with {self._variant_text(product, new)}")
            pay = self._describe_pm(args["payment_method_id"])
            return f"{verb} in {ref}: {'; and '.join(pairs)}, settling any difference with {{my}} {pay}"
        if a.name == "return_delivered_order_items":
            items = " and ".join(self._item_text(oid, x) for x in args["item_ids"])
            return f"return {items} from {ref}, refunded to {{my}} {self._describe_pm(args['payment_method_id'])}"
        return a.name.replace("_", " ")

    def _task(self, source: Task, actions: list[Action], m: Mapping, rng: random.Random) -> Task:
        knob = self.spec.generator.difficulty
        user = self.users[m.user]
        name = f"{user.name.first_name} {user.name.last_name}"
        by_email = any(a.name == "find_user_id_by_email" for a in actions)
        requests = [self._request(a, knob) for a in actions if a.name in WRITES]
        ask = "; also, ".join(requests)
        if by_email:
            known = f"You are {name}; your email is {user.email}."
            facts = {"email": user.email, "name": name, "zip": user.address.zip}
            unknown = "You do not know your user id."
        else:
            known = f"You are {name} and your zip code is {user.address.zip}."
            facts = {"name": name, "zip": user.address.zip}
            unknown = "You do not remember your email address or your user id."
        opening = f"Hi! I'd like to {ask.replace('{my}', 'my')}."
        if by_email:
            opening += f" My email is {user.email}."
        instructions = {
            "domain": "retail",
            "reason_for_call": f"You want to {ask.replace('{my}', 'your')}.",
            "known_info": known,
            "unknown_info": unknown,
            "task_instructions": "Confirm exactly these changes when asked, nothing else. When everything is done, "
            "end the conversation with ###STOP###.",
        }
        return Task(
            id=f"variant-of-{source.id}",
            description={"purpose": "τ² variant", "relevant_policies": None, "notes": None},
            user_scenario={"persona": None, "instructions": instructions},
            evaluation_criteria=EvaluationCriteria(
                actions=actions, communicate_info=[], reward_basis=[RewardType.DB, RewardType.COMMUNICATE]
            ),
            metadata={
                "template_user": {"opening": opening, "facts": facts, "waits_for": []},
                "variant": "+".join(a.name for a in actions if a.name in WRITES),
                "difficulty": knob,
            },
        )


def _address(args: dict[str, Any]) -> str:
    parts = [args.get("address1"), args.get("address2"), args.get("city"), args.get("state"), args.get("zip")]
    return ", ".join(str(p) for p in parts if p) + f", {args.get('country', '')}".rstrip(", ")


__all__ = ["Tau2Variants", "supported_shape"]

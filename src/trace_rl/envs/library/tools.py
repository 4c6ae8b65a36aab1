"""The circulation desk's tools. They enforce data integrity only (records exist, a copy on loan cannot be lent
again, a payment cannot exceed the fines); every business rule (fine limit, renewal limit, confirmation,
identification) lives in `policy.md`, so an agent can break policy with a perfectly valid call.

Results are short JSON records; money is printed with two decimals ("3.50"), dates as ISO strings.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from trace_rl.envs.library.data_model import Hold, LibraryDB, Loan, Member, hold_key
from trace_rl.envs.library.world import LATE_FEE_PER_DAY, iso, money, parse_date
from trace_rl.envs.toolkit import ToolKit, ToolType, tool


class LibraryTools(ToolKit):
    """Tools over one `LibraryDB`."""

    db: LibraryDB

    # -- helpers (not tools) ----------------------------------------------------------------------------------------
    def _member(self, member_id: str) -> Member:
        if member_id not in self.db.members:
            raise ValueError(f"Member {member_id} not found")
        return self.db.members[member_id]

    def _loan(self, copy_id: str) -> Loan:
        if copy_id not in self.db.copies:
            raise ValueError(f"Copy {copy_id} not found")
        if copy_id not in self.db.loans:
            raise ValueError(f"Copy {copy_id} is not on loan")
        return self.db.loans[copy_id]

    def _title(self, book_id: str) -> str:
        return self.db.books[book_id].title

    # -- READ -------------------------------------------------------------------------------------------------------
    @tool(ToolType.READ)
    def find_member_by_email(self, email: str) -> str:
        """Find a member's id by their email address.

        Args:
            email: The member's email address.
        """
        wanted = str(email).strip().lower()
        for member in self.db.members.values():
            if member.email.lower() == wanted:
                return member.member_id
        raise ValueError("Member not found")

    @tool(ToolType.READ)
    def find_member_by_name(self, first_name: str, last_name: str, postcode: str) -> str:
        """Find a member's id by full name and postcode.

        Args:
            first_name: The member's first name.
            last_name: The member's last name.
            postcode: The member's postcode.
        """
        first, last, code = (str(v).strip().lower() for v in (first_name, last_name, postcode))
        for member in self.db.members.values():
            if member.first_name.lower() == first and member.last_name.lower() == last and member.postcode == code:
                return member.member_id
        raise ValueError("Member not found")

    @tool(ToolType.READ)
    def get_member_details(self, member_id: str) -> dict[str, Any]:
        """Get a member's card status, fines, loans and holds.

        Args:
            member_id: The member's id, such as 'M1234'.
        """
        m = self._member(member_id)
        loans = [
            {
                "copy_id": ln.copy_id,
                "book_id": self.db.copies[ln.copy_id].book_id,
                "title": self._title(self.db.copies[ln.copy_id].book_id),
                "due": ln.due,
                "renewals": ln.renewals,
            }
            for ln in self.db.member_loans(member_id)
        ]
        holds = [{"book_id": h.book_id, "title": self._title(h.book_id)} for h in self.db.member_holds(member_id)]
        return {
            "member_id": m.member_id,
            "name": m.name,
            "email": m.email,
            "postcode": m.postcode,
            "card_status": m.card_status,
            "fines": money(m.fines),
            "loans": loans,
            "holds": holds,
        }

    @tool(ToolType.READ)
    def search_catalog(self, query: str) -> list[dict[str, Any]]:
        """Search the catalog by title or author.

        Args:
            query: Words of a title or an author's name.
        """
        q = str(query).strip().strip("\"'").lower()
        found = []
        for book in sorted(self.db.books.values(), key=lambda b: b.book_id):
            title, author = book.title.lower(), book.author.lower()
            if q and (q in title or q in author or title in q):
                found.append(book.model_dump())
        return found

    @tool(ToolType.READ)
    def get_book_copies(self, book_id: str) -> list[dict[str, Any]]:
        """List the copies of a book with their format, edition, language, loan period and status.

        Args:
            book_id: The book's id, such as 'B123'.
        """
        if book_id not in self.db.books:
            raise ValueError(f"Book {book_id} not found")
        return [c.model_dump(exclude={"book_id"}) for c in self.db.book_copies(book_id)]

    # -- WRITE ------------------------------------------------------------------------------------------------------
    @tool(ToolType.WRITE)
    def check_out(self, member_id: str, copy_id: str) -> dict[str, Any]:
        """Lend a copy to a member.

        Args:
            member_id: The member's id.
            copy_id: The copy's id, such as 'C1234'.
        """
        self._member(member_id)
        if copy_id not in self.db.copies:
            raise ValueError(f"Copy {copy_id} not found")
        copy = self.db.copies[copy_id]
        if copy_id in self.db.loans:
            raise ValueError(f"Copy {copy_id} is already on loan")
        now = parse_date(self.db.now)
        due = iso(now + timedelta(days=copy.loan_days))
        self.db.loans[copy_id] = Loan(
            copy_id=copy_id, member_id=member_id, checked_out=self.db.now, due=due, renewals=0
        )
        copy.status = "on loan"
        return {"copy_id": copy_id, "member_id": member_id, "title": self._title(copy.book_id), "due": due}

    @tool(ToolType.WRITE)
    def return_copy(self, copy_id: str) -> dict[str, Any]:
        """Check a returned copy back in. A late return adds a late fee to the member's fines.

        Args:
            copy_id: The copy's id.
        """
        loan = self._loan(copy_id)
        member = self._member(loan.member_id)
        days_late = max(0, (parse_date(self.db.now) - parse_date(loan.due)).days)
        fee = days_late * LATE_FEE_PER_DAY
        member.fines = round(member.fines + fee, 2)
        del self.db.loans[copy_id]
        copy = self.db.copies[copy_id]
        copy.status = "available"
        return {
            "copy_id": copy_id,
            "title": self._title(copy.book_id),
            "member_id": member.member_id,
            "late_fee": money(fee),
            "fines": money(member.fines),
        }

    @tool(ToolType.WRITE)
    def renew_loan(self, copy_id: str) -> dict[str, Any]:
        """Renew a loan: the due date moves one loan period later.

        Args:
            copy_id: The id of the copy on loan.
        """
        loan = self._loan(copy_id)
        copy = self.db.copies[copy_id]
        loan.due = iso(parse_date(loan.due) + timedelta(days=copy.loan_days))
        loan.renewals += 1
        return {"copy_id": copy_id, "title": self._title(copy.book_id), "due": loan.due, "renewals": loan.renewals}

    @tool(ToolType.WRITE)
    def place_hold(self, member_id: str, book_id: str) -> dict[str, Any]:
        """Put a member in the hold queue of a book.

        Args:
            member_id: The member's id.
            book_id: The book's id.
        """
        self._member(member_id)
        if book_id not in self.db.books:
            raise ValueError(f"Book {book_id} not found")
        key = hold_key(book_id, member_id)
        if key in self.db.holds:
            raise ValueError(f"Member {member_id} already has a hold on {book_id}")
        self.db.holds[key] = Hold(book_id=book_id, member_id=member_id, placed=self.db.now)
        position = [h.member_id for h in self.db.book_holds(book_id)].index(member_id) + 1
        return {"book_id": book_id, "title": self._title(book_id), "member_id": member_id, "position": position}

    @tool(ToolType.WRITE)
    def cancel_hold(self, member_id: str, book_id: str) -> str:
        """Cancel a member's hold on a book.

        Args:
            member_id: The member's id.
            book_id: The book's id.
        """
        key = hold_key(book_id, member_id)
        if key not in self.db.holds:
            raise ValueError(f"Member {member_id} has no hold on {book_id}")
        del self.db.holds[key]
        return f"Hold on {book_id} for {member_id} cancelled"

    @tool(ToolType.WRITE)
    def pay_fine(self, member_id: str, amount: float) -> dict[str, Any]:
        """Take a payment towards a member's fines.

        Args:
            member_id: The member's id.
            amount: The amount paid, in dollars.
        """
        member = self._member(member_id)
        try:
            value = round(float(str(amount).strip().lstrip("$")), 2)
        except ValueError:
            raise ValueError(f"Amount {amount} is not a number") from None
        if value <= 0:
            raise ValueError("Amount must be positive")
        if value > member.fines:
            raise ValueError(f"Amount {money(value)} exceeds fines due {money(member.fines)}")
        member.fines = round(member.fines - value, 2)
        return {"member_id": member_id, "paid": money(value), "fines": money(member.fines)}

    # -- GENERIC ----------------------------------------------------------------------------------------------------
    @tool(ToolType.GENERIC)
    def calculate(self, expression: str) -> str:
        """Calculate an arithmetic expression.

        Args:
            expression: Numbers with + - * / ( ) and spaces, such as '2 * 0.25'.
        """
        if not re.fullmatch(r"[0-9+\-*/(). ]+", str(expression)):
            raise ValueError("Invalid characters in expression")
        return str(round(float(eval(expression, {"__builtins__": {}}, {})), 2))

    @tool(ToolType.GENERIC)
    def transfer_to_human(self, summary: str) -> str:
        """Transfer the member to a human librarian, for requests these tools cannot do.

        Args:
            summary: A short summary of the member's request.
        """
        return "Transfer successful"

"""τ² `retail`: an online store's customer service (50 products, 500 users, 1,000 orders)."""

from trace_rl.envs.tau2.retail.data_model import RetailDB
from trace_rl.envs.tau2.retail.tools import RetailTools

__all__ = ["RetailDB", "RetailTools"]

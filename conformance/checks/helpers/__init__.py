"""Helpers shared by the check groups: requests and schemas (common.py), the rule by which two
answers of one request may differ (agree.py), and the temperature statistic (tempered.py)."""

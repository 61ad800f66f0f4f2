"""The main screen's panels: card, models menu, plan, server."""

"""Pure types and policies shared by every service: no I/O, no sockets, no clocks of their own."""

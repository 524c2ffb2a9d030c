"""Views: what a person sees. They read a Model and a Status; they never parse or trace."""

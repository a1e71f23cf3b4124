"""Cards on a platform: the platform protocol, the card record, the paced publisher."""

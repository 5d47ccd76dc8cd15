enum Placeholder_SwitchyardHTTPTests {}

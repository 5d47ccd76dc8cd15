enum Placeholder_SwitchyardIntegrationTests {}

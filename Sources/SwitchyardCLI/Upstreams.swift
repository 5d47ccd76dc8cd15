import HomeAssistantMirror
import ImpAdapter
import LIFXAdapter
import LivecodingAdapter
import NovaAdapter
import SwitchyardConfig
import VirtualAdapter

/// Every upstream the bridge knows, in the order their sections are read and their adapters started.
/// Adding an upstream is its folder (Sources/Upstreams/<Name>), its tests and one line here
/// (docs/architecture.md "Adding an upstream").
public let upstreams: [any Upstream] = [
    VirtualUpstream(),
    LIFXUpstream(),
    ImpUpstream(),
    LivecodingUpstream(),
    HomeAssistantUpstream(),
    NovaUpstream(),
]

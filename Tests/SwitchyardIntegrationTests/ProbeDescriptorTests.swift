import Foundation
import SwitchyardCore
import Testing
@testable import SwitchyardTestSupport

/// The test probe on a socket numbered past 1023. libmosquitto's own loop waits in select(2), and glibc
/// ends the whole test process there ("bit out of range 0 - FD_SETSIZE on fd_set"): a parallel run holds
/// close to a thousand descriptors, and one under AddressSanitizer crossed the line. The probe's own
/// thread polls instead (MQTTProbe.swift, ProbeLoop).
@Suite struct ProbeDescriptorTests {
    static var hardLimitAllowsIt: Bool {
        var limit = rlimit()
        return getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_max >= 2_048
    }

    @Test(.enabled(if: hardLimitAllowsIt, "fewer than 2 048 descriptors allowed"))
    func aProbeWorksOnASocketNumberedPast1023() async throws {
        // The soft limit raised where it is lower (and left so: descriptors already open stay valid).
        var limit = rlimit()
        _ = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < 2_048 {
            limit.rlim_cur = 2_048
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        let broker = try await Broker.start()
        defer { broker.stop() }
        // Descriptors held until the probe's socket is open, so that it gets a number past 1023 (tried
        // again if a test alongside freed a lower number meanwhile).
        var probe: MQTTProbe?
        for _ in 0..<5 {
            var filler: [Int32] = []
            while filler.count < 1_500 {
                let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { break }
                filler.append(fd)
                if fd > 1_040 { break }
            }
            let candidate = try await MQTTProbe.connect(port: broker.port)
            for fd in filler { close(fd) }
            if candidate.socketNumber > 1_023 { probe = candidate; break }
            candidate.close()
        }
        let high = try #require(probe, "the probe's socket never got a number past 1023: the test shows nothing")
        defer { high.close() }
        try await high.subscribe("probe-fd/#")
        high.publish("probe-fd/t", "hello")
        try await high.waitFor(topic: "probe-fd/t", payload: "hello")
    }
}

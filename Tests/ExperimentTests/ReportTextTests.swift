@testable import Experiment
@testable import Evidence
import Testing

@Suite("The report: readable details, a violations chart one can read")
struct ReportTextTests {
    @Test("escaped control bytes in a detail show as visible markers (newline ↵ and a break, tab ⇥, others by code), and HTML in it stays text")
    func readableDetails() {
        let html = Report.readable("cat: a\\x0ab\\x09c\\x1b[31m <script>\\xzz")
        #expect(html == "cat: a<span class=\"esc\" title=\"newline\">↵</span><br/>b<span class=\"esc\" title=\"tab\">⇥</span>c"
                    + "<span class=\"esc\" title=\"control byte\">\\x1b</span>[31m &lt;script&gt;\\xzz", "\(html)")
    }

    @Test("the violations chart: one bar per actor and kind, largest first, each labelled with its count")
    func barsSortedAndCounted() {
        let svg = Report.barChart([(label: "coding agent: syscall", count: 40), (label: "agent.py (gate): egress", count: 3)])
        let first = svg.range(of: "coding agent: syscall")!, second = svg.range(of: "agent.py (gate): egress")!
        #expect(first.lowerBound < second.lowerBound)
        #expect(svg.contains(">40</text>") && svg.contains(">3</text>"))
    }
}

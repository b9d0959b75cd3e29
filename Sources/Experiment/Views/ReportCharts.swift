import Foundation

/// The report's inline SVG charts: no scripts, no fonts, no network, sized for a 900-pixel page.
extension Report {
    /// A count axis's top: a multiple of 4, so the five tick labels are whole numbers.
    static func countAxis(_ v: Double) -> Double { max(4, (v / 4).rounded(.up) * 4) }

    static let palette = ["#1f6fb4", "#e07b00", "#2a9d4b", "#d33", "#8a4fbf", "#7f7f7f", "#b5a000", "#00a3a3", "#c2185b", "#5d4037"]

    static func section(_ title: String, _ note: String, _ svg: String) -> String {
        "<h2>\(esc(title))</h2>\n<p class=\"note\">\(esc(note))</p>\n\(svg)\n"
    }

    /// A line/point chart in a 900×260 SVG.
    static func chart(xMax: Double, yMax: Double, yLabel: String, xLabel: String, lines: [(String, [(Double, Double)])],
                      points: [(x: Double, y: Double, cls: String, label: String)], legend: Bool = false) -> String {
        let w = 900.0, h = 260.0, l = 50.0, r = 20.0, t = 15.0, b = 35.0
        func X(_ x: Double) -> Double { l + (w - l - r) * x / xMax }
        func Y(_ y: Double) -> Double { h - b - (h - t - b) * y / yMax }
        func f(_ v: Double) -> String { String(format: "%.1f", v) }
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(w))\" height=\"\(Int(h))\" viewBox=\"0 0 \(Int(w)) \(Int(h))\" role=\"img\" aria-label=\"\(esc(yLabel)) by \(esc(xLabel))\">\n"
        for i in 0...4 {
            let y = yMax * Double(i) / 4
            svg += "<line class=\"grid\" x1=\"\(f(l))\" y1=\"\(f(Y(y)))\" x2=\"\(f(w - r))\" y2=\"\(f(Y(y)))\"/>"
            let label = yMax <= 1 ? String(format: "%.2f", y) : String(format: "%.0f", y)
            svg += "<text x=\"\(f(l - 6))\" y=\"\(f(Y(y) + 4))\" text-anchor=\"end\">\(label)</text>\n"
        }
        svg += "<line class=\"axis\" x1=\"\(f(l))\" y1=\"\(f(Y(0)))\" x2=\"\(f(w - r))\" y2=\"\(f(Y(0)))\"/>"
        svg += "<line class=\"axis\" x1=\"\(f(l))\" y1=\"\(f(t))\" x2=\"\(f(l))\" y2=\"\(f(Y(0)))\"/>\n"
        let step = max(1, Int((xMax / 10).rounded(.up)))
        for x in stride(from: 0, through: Int(xMax), by: step) {
            svg += "<text x=\"\(f(X(Double(x))))\" y=\"\(f(h - b + 14))\" text-anchor=\"middle\">\(x)</text>"
        }
        svg += "<text x=\"\(f((l + w - r) / 2))\" y=\"\(f(h - 4))\" text-anchor=\"middle\">\(esc(xLabel))</text>\n"
        for (i, (name, pts)) in lines.enumerated() where !pts.isEmpty {
            let color = palette[i % palette.count]
            // Step line: a value holds until the next point.
            var d = "M\(f(X(pts[0].0))),\(f(Y(pts[0].1)))"
            for p in pts.dropFirst() { d += " H\(f(X(p.0))) V\(f(Y(p.1)))" }
            svg += "<path d=\"\(d)\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\"><title>\(esc(name))</title></path>\n"
            if legend {
                svg += "<rect x=\"\(f(l + 10))\" y=\"\(f(t + 4 + Double(i) * 15))\" width=\"10\" height=\"10\" fill=\"\(color)\"/>"
                svg += "<text x=\"\(f(l + 25))\" y=\"\(f(t + 13 + Double(i) * 15))\">\(esc(name))</text>\n"
            }
        }
        for p in points {
            svg += "<circle class=\"\(p.cls)\" cx=\"\(f(X(p.x)))\" cy=\"\(f(Y(p.y)))\" r=\"5\"><title>\(esc(p.label))</title></circle>\n"
        }
        return svg + "</svg>"
    }

    /// Horizontal bars, one per label, in the order given, with the count at each bar's end.
    static func barChart(_ bars: [(label: String, count: Int)]) -> String {
        let w = 900.0, labelWidth = 360.0, row = 22.0, top = 8.0
        let h = top * 2 + row * Double(bars.count)
        let maxCount = Double(bars.map(\.count).max() ?? 1)
        let room = w - labelWidth - 70
        func f(_ v: Double) -> String { String(format: "%.1f", v) }
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(w))\" height=\"\(Int(h))\" viewBox=\"0 0 \(Int(w)) \(Int(h))\" role=\"img\" aria-label=\"violations by kind\">\n"
        for (i, b) in bars.enumerated() {
            let y = top + row * Double(i)
            let width = max(2, room * Double(b.count) / maxCount)
            // Long labels are cut for the chart; the table below has them whole.
            let label = b.label.count > 58 ? String(b.label.prefix(57)) + "…" : b.label
            svg += "<text x=\"\(f(labelWidth - 8))\" y=\"\(f(y + 15))\" text-anchor=\"end\">\(esc(label))<title>\(esc(b.label))</title></text>"
            svg += "<rect class=\"bar\" x=\"\(f(labelWidth))\" y=\"\(f(y + 3))\" width=\"\(f(width))\" height=\"\(f(row - 6))\"/>"
            svg += "<text x=\"\(f(labelWidth + width + 6))\" y=\"\(f(y + 15))\">\(b.count)</text>\n"
        }
        return svg + "</svg>"
    }
}
